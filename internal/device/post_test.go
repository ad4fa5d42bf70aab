package device

import "testing"

// TestPostsInline: a post to an idle send queue goes out inline unless the
// last such post started a burst; a ping-pong stays inline, also when an
// ACK is late, and a bandwidth test's refills wait for the worker.
func TestPostsInline(t *testing.T) {
	type post struct {
		queued, n int
		inline    bool
	}
	for _, tc := range []struct {
		name  string
		posts []post
	}{
		{"ping-pong", []post{{1, 1, true}, {1, 1, true}, {1, 1, true}}},
		{"ping-pong with a late ACK", []post{{1, 1, true}, {2, 1, false}, {1, 1, true}, {2, 1, false}, {1, 1, true}}},
		{"refills", []post{
			{1, 1, true}, {2, 1, false}, {3, 1, false}, {4, 1, false}, // the first burst: its first post goes alone
			{1, 1, false}, {2, 1, false}, {3, 1, false}, // the next one's first waits for the worker
			{1, 1, false}, {2, 1, false}, {3, 1, false},
		}},
		{"refills in lists", []post{{4, 4, true}, {8, 4, false}, {4, 4, false}, {8, 4, false}}},
		{"back to ping-pong", []post{
			{1, 1, true}, {2, 1, false}, {3, 1, false},
			{1, 1, false}, // still taken for a burst's start
			{1, 1, true}, {1, 1, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var qp QP
			for i, p := range tc.posts {
				if got := qp.postsInline(p.queued, p.n); got != p.inline {
					t.Errorf("post %d (%d of %d queued): inline %v, want %v", i, p.n, p.queued, got, p.inline)
				}
			}
		})
	}
}
