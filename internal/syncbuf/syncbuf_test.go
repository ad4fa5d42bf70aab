package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	select {
	case <-b.Ready():
		t.Fatal("ready before any write")
	default:
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); fmt.Fprintf(&b, "line %d\n", i) }()
	}
	<-b.Ready()
	wg.Wait()
	if !b.Contains("line 7\n") || len(b.String()) != 8*len("line 0\n") {
		t.Errorf("buffer %q", b.String())
	}
}
