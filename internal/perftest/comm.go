package perftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"time"
)

// Version is the perftest version goroce's tools advertise in the
// out-of-band exchange: that of perftest 4.5-0.17 (Debian 12), the real
// perftest we test against. Peers from 6.28 on would otherwise ship a
// binary parameter struct that embeds a C struct ibv_device_attr
// (negotiate_params); below 6.28 they keep to the ASCII exchange, and any
// peer accepts it (perftest rejects versions below 5.70).
const Version = "6.06"

const versionLen = 16 // char version[MAX_VERSION]

// Conn is the out-of-band TCP connection of a perftest run
// (perftest_communication.c). Every exchange is symmetric: the client
// writes first and then reads, the server reads and then writes, so a
// message of one side meets the same-sized message of the other.
type Conn struct {
	c      net.Conn
	client bool
	// RemoteVersion is the peer's version string, once Versions ran.
	RemoteVersion string
}

// NewConn wraps an established connection; client is the side that dialed.
func NewConn(c net.Conn, client bool) *Conn { return &Conn{c: c, client: client} }

// exchange sends mine and reads len(theirs) bytes (ctx_xchg_data).
func (c *Conn) exchange(mine, theirs []byte) error {
	if c.client {
		if _, err := c.c.Write(mine); err != nil {
			return err
		}
		_, err := io.ReadFull(c.c, theirs)
		return err
	}
	if _, err := io.ReadFull(c.c, theirs); err != nil {
		return err
	}
	_, err := c.c.Write(mine)
	return err
}

// Versions exchanges version strings (exchange_versions) and checks the
// peer's (check_version_compatibility).
func (c *Conn) Versions() error {
	var mine, theirs [versionLen]byte
	copy(mine[:], Version)
	if err := c.exchange(mine[:], theirs[:]); err != nil {
		return fmt.Errorf("exchange versions: %w", err)
	}
	c.RemoteVersion = string(bytes.TrimRight(theirs[:], "\x00"))
	if v := c.remoteVersion(); v < 5.70 {
		return fmt.Errorf("peer's perftest version %q: versions older than 5.70 are not compatible", c.RemoteVersion)
	}
	return nil
}

// remoteVersion is atof of the peer's version.
func (c *Conn) remoteVersion() float64 {
	s := c.RemoteVersion
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.') {
		end++
	}
	v, _ := strconv.ParseFloat(s[:end], 64)
	return v
}

// SysData exchanges the cycle buffer (page) size and cache line size, and
// returns the larger of each (check_sys_data).
func (c *Conn) SysData(cycleBuffer, cacheLine int) (int, int, error) {
	var mine, theirs [8]byte
	binary.BigEndian.PutUint32(mine[:4], uint32(cycleBuffer))
	binary.BigEndian.PutUint32(mine[4:], uint32(cacheLine))
	if err := c.exchange(mine[:4], theirs[:4]); err != nil {
		return 0, 0, fmt.Errorf("exchange page size: %w", err)
	}
	if err := c.exchange(mine[4:], theirs[4:]); err != nil {
		return 0, 0, fmt.Errorf("exchange cache line size: %w", err)
	}
	return max(cycleBuffer, int(int32(binary.BigEndian.Uint32(theirs[:4])))),
		max(cacheLine, int(int32(binary.BigEndian.Uint32(theirs[4:])))), nil
}

// MTU exchanges the IB MTU enums (1 = 256 … 5 = 4096) as two ASCII bytes
// and returns the smaller valid one (check_mtu).
func (c *Conn) MTU(mine int) (int, error) {
	var m, theirs [2]byte
	copy(m[:], strconv.Itoa(mine))
	if err := c.exchange(m[:], theirs[:]); err != nil {
		return 0, fmt.Errorf("exchange MTU: %w", err)
	}
	rem, err := strconv.Atoi(string(bytes.TrimRight(theirs[:], "\x00")))
	if err == nil && rem >= 1 && rem <= 5 && rem < mine {
		return rem, nil
	}
	return mine, nil
}

// HandShake exchanges one QP record (ctx_hand_shake). Later calls serve as
// barriers between the two sides.
func (c *Conn) HandShake(mine Dest) (Dest, error) {
	var theirs [recordLen]byte
	if err := c.exchange(mine.Marshal(), theirs[:]); err != nil {
		return Dest{}, fmt.Errorf("exchange QP record: %w", err)
	}
	return ParseDest(theirs[:])
}

// BWReport is one side's bandwidth result (struct bw_report_data).
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// BWReports exchanges results (xchg_bw_reports): five 8-byte big-endian
// values, one exchange each.
func (c *Conn) BWReports(mine BWReport) (BWReport, error) {
	var theirs BWReport
	put := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	fields := []struct {
		mine   uint64
		theirs *uint64
	}{
		{mine.Size, &theirs.Size}, {mine.Iters, &theirs.Iters},
		{math.Float64bits(mine.BWPeak), nil}, {math.Float64bits(mine.BWAvg), nil}, {math.Float64bits(mine.MsgRate), nil},
	}
	floats := []*float64{&theirs.BWPeak, &theirs.BWAvg, &theirs.MsgRate}
	var b [8]byte
	for i, f := range fields {
		if err := c.exchange(put(f.mine), b[:]); err != nil {
			return theirs, fmt.Errorf("exchange reports: %w", err)
		}
		v := binary.BigEndian.Uint64(b[:])
		if f.theirs != nil {
			*f.theirs = v
		} else {
			*floats[i-2] = math.Float64frombits(v)
		}
	}
	return theirs, nil
}

// doneMsg is what perftest before 2023 (including 4.5-0.17) writes after
// the last handshake (ctx_close_connection).
const doneMsg = "done\x00"

// Close ends the run: a last handshake, then "done" as the perftest
// version we advertise sends it, and a wait (bounded) for the peer to
// close its side, so that neither side's last write meets a reset.
func (c *Conn) Close(mine Dest) error {
	defer c.c.Close()
	if _, err := c.HandShake(mine); err != nil {
		return fmt.Errorf("closing handshake: %w", err)
	}
	c.c.Write([]byte(doneMsg)) // the peer may already be gone; newer ones never read it
	if tc, ok := c.c.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
	}
	c.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	io.Copy(io.Discard, c.c)
	return nil
}
