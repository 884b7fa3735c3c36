package redlimit

// LocalKeys exposes, to tests, how many keys the FailLocal fallback holds.
func LocalKeys(p *Policy) int { return p.local.size() }
