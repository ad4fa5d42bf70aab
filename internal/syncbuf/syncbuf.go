// Package syncbuf is a bytes.Buffer that one goroutine, or a process's
// output, writes while another reads it: the tools' tests and goroce bench
// watch a server's output for its banner this way.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use. The zero value is ready to use.
type Buffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed by the first Write; made on demand
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() == 0 && len(p) > 0 {
		close(s.ch())
	}
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Contains reports whether what was written so far contains sub.
func (s *Buffer) Contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Contains(s.b.Bytes(), []byte(sub))
}

// Ready is closed once something has been written (for a server's output:
// it is listening).
func (s *Buffer) Ready() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch()
}

func (s *Buffer) ch() chan struct{} {
	if s.written == nil {
		s.written = make(chan struct{})
	}
	return s.written
}
