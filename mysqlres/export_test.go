package mysqlres

// SetRebuildHook runs f in RebuildShops once a shop's active reservations
// are dropped, until the returned func is called.
func SetRebuildHook(f func(shop int64)) (reset func()) {
	testHookRebuildDropped = f
	return func() { testHookRebuildDropped = nil }
}
