package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/wire"
)

const decodeHelp = `usage: goroce decode [-q] FILE.pcap...

Prints one line per RoCEv2 packet (UDP destination port 4791) in each pcap
or pcapng file:

  FRAME SRC → DST TRANSPORT OPCODE qpn=0x… psn=… ackreq=0|1 len=PAYLOAD [header fields] icrc=OK|BAD

and recomputes every packet's invariant CRC. Other frames are skipped.
Exit status: 0 if every ICRC is correct, 1 if any is bad or a RoCEv2
packet is malformed, 2 if a file cannot be read.
`

func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("q", false, "print only bad packets and the per-file summary")
	fs.Usage = func() { fmt.Fprint(stderr, decodeHelp); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	status := 0
	for _, path := range fs.Args() {
		var s decodeStats
		err := decodeFile(out, path, *quiet, &s)
		fmt.Fprintf(out, "# %s: %d RoCEv2 packets, %d bad ICRC, %d malformed\n", path, s.packets, s.badICRC, s.malformed)
		if err != nil {
			out.Flush()
			fmt.Fprintf(stderr, "goroce decode: %v\n", err)
			status = 2
			continue
		}
		if (s.badICRC > 0 || s.malformed > 0) && status == 0 {
			status = 1
		}
	}
	return status
}

type decodeStats struct {
	packets, badICRC, malformed int
}

func decodeFile(out *bufio.Writer, path string, quiet bool, s *decodeStats) error {
	r, err := capture.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	var p wire.Packet
	for {
		d, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if d.DstPort != wire.UDPPort {
			continue
		}
		s.packets++
		bad := formatDatagram(out, &d, &p, quiet)
		switch bad {
		case badICRC:
			s.badICRC++
		case badMalformed:
			s.malformed++
		}
	}
}

type verdict int

const (
	good verdict = iota
	badICRC
	badMalformed
)

// formatDatagram checks one RoCEv2 datagram and prints its line.
func formatDatagram(out *bufio.Writer, d *capture.Datagram, p *wire.Packet, quiet bool) verdict {
	v := good
	var reason error
	computed, stored, icrcErr := wire.ICRCOfIP(d.IP)
	icrcOK := icrcErr == nil && computed == stored
	if d.Malformed != nil {
		v, reason = badMalformed, d.Malformed
	} else if err := p.Parse(d.Payload); err != nil {
		v, reason = badMalformed, err
	} else if !icrcOK {
		v = badICRC
	}
	if quiet && v == good {
		return v
	}
	fmt.Fprintf(out, "%d %s → %s ", d.Frame, d.Src, d.Dst)
	if reason != nil {
		fmt.Fprintf(out, "malformed: %v", reason)
		if icrcErr == nil {
			fmt.Fprintf(out, " icrc=%s", okBad(icrcOK))
		}
		out.WriteByte('\n')
		return v
	}
	writePacket(out, p)
	fmt.Fprintf(out, " icrc=%s\n", okBad(icrcOK))
	return v
}

func okBad(ok bool) string {
	if ok {
		return "OK"
	}
	return "BAD"
}

// writePacket prints the transport, opcode, BTH fields and every extended
// header present, as key=value pairs.
func writePacket(out *bufio.Writer, p *wire.Packet) {
	info, bth := p.Info, p.BTH
	if info.Transport == wire.CNP {
		out.WriteString("CNP CNP")
	} else {
		fmt.Fprintf(out, "%s %s", info.Transport, info.Name)
	}
	fmt.Fprintf(out, " qpn=0x%06x psn=%d ackreq=%d len=%d", bth.DestQP(), bth.PSN(), b2i(bth.AckReq()), len(p.Payload))
	if bth.SE() {
		out.WriteString(" se=1")
	}
	if bth.MigReq() {
		out.WriteString(" migreq=1")
	}
	if bth.PadCount() != 0 {
		fmt.Fprintf(out, " pad=%d", bth.PadCount())
	}
	if bth.PKey() != wire.DefaultPKey {
		fmt.Fprintf(out, " pkey=0x%04x", bth.PKey())
	}
	if bth.FECN() {
		out.WriteString(" fecn=1")
	}
	if bth.BECN() {
		out.WriteString(" becn=1")
	}
	if h := p.DETH; h != nil {
		fmt.Fprintf(out, " qkey=0x%08x srcqp=0x%06x", h.QKey(), h.SrcQP())
	}
	if h := p.FETH; h != nil {
		fmt.Fprintf(out, " flush.sel=%d flush.type=%d", h.SelectivityLevel(), h.PlacementType())
	}
	if h := p.RETH; h != nil {
		fmt.Fprintf(out, " va=0x%016x rkey=0x%08x dlen=%d", h.VA(), h.RKey(), h.DMALen())
	}
	if h := p.AtomicETH; h != nil {
		fmt.Fprintf(out, " va=0x%016x rkey=0x%08x", h.VA(), h.RKey())
		if bth.Opcode().Op() == wire.OpCompareSwap {
			fmt.Fprintf(out, " swap=0x%016x compare=0x%016x", h.SwapAdd(), h.Compare())
		} else {
			fmt.Fprintf(out, " add=0x%016x", h.SwapAdd())
		}
	}
	if h := p.ImmDt; h != nil {
		fmt.Fprintf(out, " imm=0x%08x", h.Imm())
	}
	if h := p.IETH; h != nil {
		fmt.Fprintf(out, " inv.rkey=0x%08x", h.RKey())
	}
	if h := p.AETH; h != nil {
		fmt.Fprintf(out, " aeth=%s msn=%d", h.AckSummary(), h.MSN())
	}
	if h := p.AtomicAckETH; h != nil {
		fmt.Fprintf(out, " orig=0x%016x", h.OrigData())
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
