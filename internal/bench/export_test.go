package bench

// Unexported helpers the external tests exercise.
var (
	ModePath = modePath
	DialAddr = dialAddr
)
