package device

import (
	"testing"

	"github.com/goroce/goroce/internal/link/shm"
)

// TestRingHoldsBudget: a same-host ring holds every packet a device's RC
// QPs may have in flight together, so the budget, not the ring, limits
// what a sender has outstanding.
func TestRingHoldsBudget(t *testing.T) {
	if shm.SameHostSlots < sendBudget {
		t.Errorf("a same-host ring holds %d packets, less than the send budget of %d PSNs", shm.SameHostSlots, sendBudget)
	}
}
