//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/netns"
)

// rendezvousDir returns this user's directory under run directory dir for
// network namespace ns
// (nil: the process's own), creating it, or an error if it is not safe to
// use.
func rendezvousDir(dir string, ns *netns.NS) (string, error) {
	uid := os.Getuid()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("%s is not a directory of uid %d with mode 0700", dir, uid)
	}
	ino, err := ns.Inode()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "samehost-netns-"+strconv.FormatUint(ino, 10))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return dir, nil
}

func socketName(dir string, a netip.AddrPort) string {
	return filepath.Join(dir, a.Addr().Unmap().String()+"_"+strconv.Itoa(int(a.Port())))
}

// accept takes the channels peers open to this link.
func (s *Mux) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil { // closing
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve sets up the channel a peer opens on c, then waits for the peer to
// close c, which ends the channel.
func (s *Mux) serve(c *net.UnixConn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	in, err := s.handshake(c)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.added = append(s.added, in)
	s.pending.Store(true)
	s.mu.Unlock()
	signal(s.wake)
	var b [1]byte
	c.Read(b[:]) // returns when the peer closes or exits, or on Close
	in.dead.Store(true)
	signal(s.wake) // a waiting reader retires the channel (ready)
}

// handshake checks a peer's hello and maps its ring.
func (s *Mux) handshake(c *net.UnixConn) (*shmIn, error) {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cerr != nil || int(cred.Uid) != os.Getuid() {
		return nil, errors.New("peer of another user")
	}
	msg := make([]byte, shmHelloLen)
	oob := make([]byte, unix.CmsgSpace(2*4))
	n, oobn, _, _, err := c.ReadMsgUnix(msg, oob)
	if err != nil {
		return nil, err
	}
	fds := parseRights(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	if n != shmHelloLen || string(msg[:8]) != shmMagic || len(fds) != 2 ||
		binary.LittleEndian.Uint32(msg[8:]) != 1 || binary.LittleEndian.Uint32(msg[12:]) != shmSlots ||
		binary.LittleEndian.Uint32(msg[16:]) != shmSlotSize {
		closeAll()
		return nil, errors.New("bad hello")
	}
	peer := netip.AddrFrom16([16]byte(msg[20:36])).Unmap()
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil || st.Size != shmRingSize {
		closeAll()
		return nil, errors.New("bad ring")
	}
	mem, err := unix.Mmap(fds[0], 0, shmRingSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	unix.Close(fds[0])
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	in := &shmIn{peer: peer, ring: &shmRing{mem: mem, mapped: true}, doorbell: fds[1]}
	in.head = in.ring.u64(shmOffHead).Load()
	if err := s.inner.Watch(in.doorbell); err != nil {
		in.ring.unmap()
		unix.Close(in.doorbell)
		return nil, err
	}
	if _, err := c.Write([]byte{'k'}); err != nil {
		s.inner.Unwatch(in.doorbell)
		in.ring.unmap()
		unix.Close(in.doorbell)
		return nil, err
	}
	return in, nil
}

func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// channel returns the channel to send to peer on, or nil for UDP; s.writeMu
// is held.
func (s *Mux) channel(peer netip.AddrPort) *shmOut {
	if o := s.last; o != nil && o.peer == peer && o.ring != nil {
		return o
	}
	o := s.out[peer]
	switch {
	case o == nil:
		o = &shmOut{peer: peer}
		s.out[peer] = o
		s.dial(o)
	case o.ring == nil && monotime.Now().After(o.retryAt):
		s.dial(o)
	}
	if o.ring == nil {
		return nil
	}
	s.last = o
	return o
}

// dial opens a channel to o.peer, or sets when to try again.
func (s *Mux) dial(o *shmOut) {
	o.retryAt = monotime.Now().Add(shmRetry)
	if o.peer.Addr().Unmap().Is4() != s.laddr.Addr().Is4() || o.peer == s.laddr {
		return
	}
	if _, err := os.Stat(socketName(s.dir, o.peer)); err != nil {
		return // the common case of a remote peer: no system call beyond this one
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketName(s.dir, o.peer), Net: "unix"})
	if err != nil {
		return
	}
	ring, doorbell, err := s.offer(c)
	if err != nil {
		c.Close()
		return
	}
	*o = shmOut{peer: o.peer, ring: ring, doorbell: doorbell, conn: c, tail: ring.u64(shmOffTail).Load()}
	s.open.Add(1)
}

// offer creates a ring and a doorbell, passes them to the peer on c and
// waits for its answer.
func (s *Mux) offer(c *net.UnixConn) (*shmRing, int, error) {
	mfd, err := unix.MemfdCreate("goroce-ring", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, err
	}
	defer unix.Close(mfd)
	if err := unix.Ftruncate(mfd, shmRingSize); err != nil {
		return nil, -1, err
	}
	// MAP_POPULATE here and in the peer's handshake: the ring's pages
	// are allocated and mapped on both sides now, not one by one as the
	// first packets fill the slots. Each slot is a page of its own, and a
	// first touch costs a page fault on each side. Writing the ring once
	// more (its pages are zero already) leaves its page table entries
	// dirty and its lines in the cache: the first pass through the ring
	// then costs what later ones do (docs/design/tuning.md#ring-populate).
	mem, err := unix.Mmap(mfd, 0, shmRingSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, -1, err
	}
	clear(mem)
	ring := &shmRing{mem: mem, mapped: true}
	doorbell, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ring.unmap()
		return nil, -1, err
	}
	msg := make([]byte, shmHelloLen)
	copy(msg, shmMagic)
	binary.LittleEndian.PutUint32(msg[8:], 1)
	binary.LittleEndian.PutUint32(msg[12:], shmSlots)
	binary.LittleEndian.PutUint32(msg[16:], shmSlotSize)
	a16 := s.laddr.Addr().As16()
	copy(msg[20:36], a16[:])
	c.SetDeadline(time.Now().Add(2 * time.Second))
	_, _, err = c.WriteMsgUnix(msg, unix.UnixRights(mfd, doorbell), nil)
	var ack [1]byte
	if err == nil {
		_, err = c.Read(ack[:])
	}
	c.SetDeadline(time.Time{})
	if err == nil && ack[0] != 'k' {
		err = errors.New("refused")
	}
	if err != nil {
		ring.unmap()
		unix.Close(doorbell)
		return nil, -1, err
	}
	return ring, doorbell, nil
}
