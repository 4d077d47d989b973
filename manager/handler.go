package manager

// cacheHandler calls f on every notification; for the caches the applier
// compares with, whose changes need a new comparison but no event.
type cacheHandler struct{ f func() }

func (h cacheHandler) OnAdd(any, bool)   { h.f() }
func (h cacheHandler) OnUpdate(any, any) { h.f() }
func (h cacheHandler) OnDelete(any)      { h.f() }
