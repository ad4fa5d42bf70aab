package targets

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/syncbuf"
)

// TestFloorEnds runs End's two UDP ends against each other, as Run
// starts them in two processes: the echo prints its port, the ping its
// median one-way time.
func TestFloorEnds(t *testing.T) {
	var srvOut syncbuf.Buffer
	var srvErr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- End([]string{"udp-echo", "127.0.0.1", "200"}, &srvOut, &srvErr) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(srvOut.String(), "\n") {
		if time.Now().After(deadline) {
			t.Fatal("the echo printed no port")
		}
		time.Sleep(time.Millisecond)
	}
	port := strings.TrimSpace(strings.TrimPrefix(srvOut.String(), "port "))
	var out, errb bytes.Buffer
	if code := End([]string{"udp-ping", "127.0.0.2", "127.0.0.1:" + port, "200"}, &out, &errb); code != 0 {
		t.Fatalf("ping: exit %d: %s", code, errb.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("echo: exit %d: %s", code, srvErr.String())
	}
	if v, err := endFigure(out.String(), "t_typical"); err != nil || v <= 0 {
		t.Errorf("ping printed %q: %v, %v", out.String(), v, err)
	}
}
