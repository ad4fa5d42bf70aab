package netns

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newVeth makes a pair for a test, or skips it where namespaces cannot be
// made (not root, no ip command).
func newVeth(t *testing.T) *Veth {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := Tool("ip"); err != nil {
		t.Skip(err)
	}
	v, err := NewVeth("goroce-nt", netip.MustParsePrefix("198.18.12.1/24"), netip.MustParsePrefix("198.18.12.2/24"), 9000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	return v
}

// TestDo sends a datagram from a socket made in one namespace to one made
// in the other, across the veth, and checks that each socket lives where
// it was made: neither can bind the other end's address, nor can the
// process's own namespace.
func TestDo(t *testing.T) {
	v := newVeth(t)
	listen := func(ns *NS, a netip.Addr) (c *net.UDPConn, err error) {
		err = ns.Do(func() error {
			c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
			return err
		})
		return c, err
	}
	for _, bad := range []struct {
		ns   *NS
		addr netip.Addr
	}{{v.NSA, v.B}, {v.NSB, v.A}, {nil, v.A}} {
		if c, err := listen(bad.ns, bad.addr); !errors.Is(err, syscall.EADDRNOTAVAIL) {
			if c != nil {
				c.Close()
			}
			t.Errorf("bind %v in %q: %v, want EADDRNOTAVAIL", bad.addr, bad.ns.Name(), err)
		}
	}
	a, err := listen(v.NSA, v.A)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := listen(v.NSB, v.B)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The sockets are used from this goroutine's thread, outside both.
	if _, err := a.WriteToUDPAddrPort([]byte("across"), b.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, from, err := b.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "across" || from != a.LocalAddr().(*net.UDPAddr).AddrPort() {
		t.Errorf("got %q from %v, want \"across\" from %v", buf[:n], from, a.LocalAddr())
	}
	ia, err := v.NSA.Inode()
	if err != nil {
		t.Fatal(err)
	}
	ib, _ := v.NSB.Inode()
	self, _ := (*NS)(nil).Inode()
	if ia == ib || ia == self || ib == self {
		t.Errorf("inodes a %d, b %d, own %d: want three namespaces", ia, ib, self)
	}
}

// TestDoLeavesMainThread enters a namespace many times: the main thread
// must stay in the process's namespace, which /proc/self/ns/net shows. A
// Do that ran on the main thread would leave it parked in the other one,
// and /proc/self/net/snmp would then count that namespace's datagrams
// (verbs' TestFaultyUDP reads the kernel's drops there).
func TestDoLeavesMainThread(t *testing.T) {
	v := newVeth(t)
	for range 200 {
		if err := v.NSA.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	own, err := (*NS)(nil).Inode()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino != own {
		a, _ := v.NSA.Inode()
		t.Errorf("the main thread is in namespace %d (the veth's a: %d), not the process's %d", st.Ino, a, own)
	}
}

// TestDoError passes fn's error through, and entering fails cleanly for a
// namespace the process cannot enter.
func TestDoError(t *testing.T) {
	want := errors.New("fn failed")
	if err := (*NS)(nil).Do(func() error { return want }); err != want {
		t.Errorf("nil NS: %v, want %v", err, want)
	}
	ns, err := Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	err = ns.Do(func() error { return want })
	if os.Geteuid() == 0 && err != want {
		t.Errorf("own namespace: %v, want %v", err, want)
	}
	if os.Geteuid() != 0 && (err == nil || !strings.Contains(err.Error(), "setns")) {
		t.Errorf("own namespace, not root: %v, want a setns error", err)
	}
}

// TestOpenRejects refuses files that are not network namespaces.
func TestOpenRejects(t *testing.T) {
	for _, p := range []string{"/proc/self/ns/mnt", "/proc/self/status", os.DevNull, "/nonexistent/netns"} {
		if ns, err := Open(p); err == nil {
			ns.Close()
			t.Errorf("Open(%q) succeeded, want an error", p)
		}
	}
}

// TestNewVethRejects checks the addresses before making anything.
func TestNewVethRejects(t *testing.T) {
	if _, err := Tool("ip"); err != nil {
		t.Skip(err)
	}
	if _, err := NewVeth("goroce-nt", netip.MustParsePrefix("198.18.12.1/24"), netip.MustParsePrefix("2001:2::1/64"), 1500); err == nil || !strings.Contains(err.Error(), "one family") {
		t.Errorf("mixed families: %v", err)
	}
}
