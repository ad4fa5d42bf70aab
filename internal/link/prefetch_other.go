//go:build !amd64 || purego

package link

// prefetchWrite is a hint for the cache lines [p, p+64*lines) about to be
// written; here it does nothing.
func prefetchWrite(p *byte, lines int) {}

// prefetchRead is a hint for the cache lines [p, p+64*lines) about to be
// read; here it does nothing.
func prefetchRead(p *byte, lines int) {}
