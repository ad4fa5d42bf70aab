// Package capture reads IP/UDP datagrams out of pcap and pcapng captures,
// for decoding RoCEv2 traffic.
//
// File formats are read with gopacket's pcapgo (classic pcap in either byte
// order with microsecond or nanosecond timestamps, pcapng, and gzip-compressed
// forms of both). The link layer, IP and UDP headers are decoded here by
// offset, without per-frame allocation. Supported link types: Ethernet (with
// any number of 802.1Q, 802.1ad or 0x9100 VLAN tags), Linux cooked SLL and
// SLL2, raw IP (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6) and BSD
// loopback (LINKTYPE_NULL, LINKTYPE_LOOP).
//
// Checksums (IPv4 header, UDP) are not verified.
package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Datagram is one UDP datagram found in a capture.
//
// IP and Payload point into the Reader's frame buffer: they are valid only
// until the next call to Next. Use Clone to keep a Datagram longer.
type Datagram struct {
	Frame            int       // 1-based frame number in the file, counting every frame as tshark does
	Time             time.Time // capture timestamp, UTC
	IPv6             bool
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16

	// IP runs from the first byte of the IP header to the end of the UDP
	// payload, trimmed to the IPv4 total length or the IPv6 payload length,
	// so link-layer padding is not included.
	IP []byte

	// IPHeaderLen is the offset of the UDP header in IP: the IHL times 4 for
	// IPv4 (20 plus options), 40 for IPv6 plus the length of any hop-by-hop,
	// routing, destination-options or atomic-fragment extension headers that
	// precede UDP.
	IPHeaderLen int

	// Payload is the UDP payload, a subslice of IP.
	Payload []byte

	// Malformed is non-nil when the frame is IPv4 or IPv6 carrying UDP (or
	// its IP header is too damaged to tell) but it cannot be taken as a
	// complete datagram: the capture truncated it (ErrTruncated), it is an
	// IP fragment (ErrFragment), the IP version does not match the link
	// layer, the IHL is bad, or the IP and UDP lengths disagree with each
	// other or with the captured bytes. The other fields are then filled in
	// as far as the captured bytes allow; Payload is always within IP.
	Malformed error
}

// Clone returns a copy of d whose IP and Payload do not share memory with
// the Reader.
func (d Datagram) Clone() Datagram {
	if d.IP == nil {
		return d
	}
	ip := append([]byte(nil), d.IP...)
	if d.Payload != nil {
		off := cap(d.IP) - cap(d.Payload) // Payload is a subslice of IP
		if off >= 0 && off+len(d.Payload) <= len(ip) {
			d.Payload = ip[off : off+len(d.Payload)]
		} else {
			d.Payload = nil
		}
	}
	d.IP = ip
	return d
}

// packetSource is the part of pcapgo.Reader and pcapgo.NgReader used here.
type packetSource interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// Reader returns the UDP datagrams of a capture file in frame order.
type Reader struct {
	name   string // file name used in errors; empty for NewReader
	closer io.Closer
	src    packetSource
	link   layers.LinkType // classic pcap: the file's link type
	ng     bool            // pcapng: the link type comes with each frame
	frames int
	err    error // sticky error after a failed read
}

// Magic numbers at the start of the supported files.
const (
	magicPcapMicro = 0xa1b2c3d4
	magicPcapNano  = 0xa1b23c4d
	magicPcapng    = 0x0a0d0d0a // section header block type
)

// Open opens a pcap or pcapng file (optionally gzip-compressed). The error
// names the file when it cannot be read, is neither pcap nor pcapng, or (for
// classic pcap) has a link type this package does not decode.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	r, err := newReader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads a pcap or pcapng stream (optionally gzip-compressed) from
// rd. Close on the returned Reader does not close rd.
func NewReader(rd io.Reader) (*Reader, error) {
	return newReader(rd, "")
}

func newReader(rd io.Reader, name string) (*Reader, error) {
	r := &Reader{name: name}
	br := bufio.NewReader(rd)
	head, err := br.Peek(4)
	if len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, zerr := gzip.NewReader(br)
		if zerr != nil {
			return nil, r.wrap(fmt.Errorf("bad gzip stream: %w", zerr))
		}
		br = bufio.NewReader(zr)
		head, err = br.Peek(4)
	}
	if err != nil {
		if err == io.EOF {
			return nil, r.wrap(fmt.Errorf("not a pcap or pcapng file: only %d bytes", len(head)))
		}
		return nil, r.wrap(err)
	}
	le, be := binary.LittleEndian.Uint32(head), binary.BigEndian.Uint32(head)
	switch {
	case le == magicPcapng:
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, r.wrap(fmt.Errorf("bad pcapng header: %w", err))
		}
		r.src, r.ng = ng, true
	case le == magicPcapMicro || le == magicPcapNano || be == magicPcapMicro || be == magicPcapNano:
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, r.wrap(fmt.Errorf("bad pcap header: %w", err))
		}
		if !supported(pr.LinkType()) {
			return nil, r.wrap(fmt.Errorf("unsupported link type %d (%v)", pr.LinkType(), pr.LinkType()))
		}
		r.src, r.link = pr, pr.LinkType()
	default:
		return nil, r.wrap(fmt.Errorf("not a pcap or pcapng file (starts with %02x)", head))
	}
	return r, nil
}

// wrap prefixes err with the package and file name.
func (r *Reader) wrap(err error) error {
	if r.name == "" {
		return fmt.Errorf("capture: %w", err)
	}
	return fmt.Errorf("capture: %s: %w", r.name, err)
}

// Next returns the next UDP datagram, or io.EOF after the last frame.
// Frames that are not IPv4/IPv6 UDP (ARP, TCP, ICMP, ...) are skipped but
// still counted in Datagram.Frame. Malformed frames are returned with
// Datagram.Malformed set, not as errors; an error means the file itself
// could not be read further (a truncated record, or in pcapng a frame on an
// interface whose link type is not supported), and is returned again by
// later calls. The returned slices are reused by the next call.
func (r *Reader) Next() (Datagram, error) {
	for r.err == nil {
		data, ci, err := r.src.ZeroCopyReadPacketData()
		if err != nil {
			if err == io.EOF && ci.CaptureLength > 0 {
				err = io.ErrUnexpectedEOF // file ends right after a record header
			}
			if err == io.EOF {
				r.err = io.EOF
			} else {
				r.err = r.wrap(fmt.Errorf("frame %d: %w", r.frames+1, err))
			}
			break
		}
		r.frames++
		link := r.link
		if r.ng {
			var lt layers.LinkType
			ok := len(ci.AncillaryData) > 0
			if ok {
				lt, ok = ci.AncillaryData[0].(layers.LinkType)
			}
			if !ok || !supported(lt) {
				r.err = r.wrap(fmt.Errorf("frame %d: unsupported link type %d (%v)", r.frames, lt, lt))
				break
			}
			link = lt
		}
		d, ok := decodeFrame(link, data, ci.CaptureLength < ci.Length)
		if !ok {
			continue
		}
		d.Frame = r.frames
		d.Time = ci.Timestamp
		return d, nil
	}
	return Datagram{}, r.err
}

// Frames returns the number of frames read so far, datagrams or not.
func (r *Reader) Frames() int { return r.frames }

// Close closes the file opened by Open. For a Reader made by NewReader it
// does nothing.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	c := r.closer
	r.closer = nil
	return c.Close()
}

// WriteEthernetPcap writes frames as a classic pcap file (microsecond
// timestamps, LINKTYPE_ETHERNET), each frame fully captured. Frame i is
// stamped i milliseconds after the Unix epoch so the output is reproducible.
func WriteEthernetPcap(w io.Writer, frames [][]byte) error {
	snaplen := 262144
	for _, f := range frames {
		snaplen = max(snaplen, len(f))
	}
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(uint32(snaplen), layers.LinkTypeEthernet); err != nil {
		return err
	}
	for i, f := range frames {
		ci := gopacket.CaptureInfo{
			Timestamp:     time.Unix(0, int64(i)*int64(time.Millisecond)),
			CaptureLength: len(f),
			Length:        len(f),
		}
		if err := pw.WritePacket(ci, f); err != nil {
			return err
		}
	}
	return nil
}
