package capture

// SetBeforeWrite makes r run f before it writes each operation.
func SetBeforeWrite(r *Recorder, f func()) { r.beforeWrite = f }
