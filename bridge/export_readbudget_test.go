package bridge

// ReadsUsed is what the bridge's read budget holds now (tests).
func ReadsUsed(b *Bridge) int64 { return b.reads.Used() }
