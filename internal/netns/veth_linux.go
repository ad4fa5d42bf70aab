package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Veth is two network namespaces made for one run, joined by a veth pair:
// one end in NSA holding address A, the other in NSB holding B. Close
// deletes them.
type Veth struct {
	NSA, NSB   *NS
	A, B       netip.Addr
	DevA, DevB string // the veth's two ends, in NSA and NSB

	ip    string    // the ip command's path
	names [2]string // the namespaces' names, under /run/netns
}

// veths numbers the pairs of this process, for their names.
var veths atomic.Int32

// NewVeth creates namespaces named tag-<pid>-<n>-a and -b (n counts this
// process's pairs), a veth pair between them with MTU mtu, address a on
// its end in the first and b in the second, both ends and both loopbacks
// up. The ends get no IPv6 link-local address, so the pair carries only
// what the caller sends. It needs root and iproute2's ip command. The
// host's own network is not touched: the veth is created inside the
// namespaces.
func NewVeth(tag string, a, b netip.Prefix, mtu int) (v *Veth, err error) {
	ip, err := Tool("ip")
	if err != nil {
		return nil, fmt.Errorf("%w (apt-get install iproute2)", err)
	}
	if !a.IsValid() || !b.IsValid() || a.Addr().Is4() != b.Addr().Is4() {
		return nil, fmt.Errorf("netns: veth addresses %v and %v: want two prefixes of one family", a, b)
	}
	n, pid := veths.Add(1), os.Getpid()
	v = &Veth{ip: ip, A: a.Addr(), B: b.Addr()}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	for i, end := range []string{"a", "b"} {
		name := fmt.Sprintf("%s-%d-%d-%s", tag, pid, n, end)
		if err := v.run("netns", "add", name); err != nil {
			if os.Geteuid() != 0 {
				err = fmt.Errorf("%w (creating network namespaces needs root)", err)
			}
			return v, err
		}
		v.names[i] = name
	}
	// Interface names have at most 15 bytes: "gr" + pid (≤ 7 digits) +
	// "-" + n + "a".
	va, vb := fmt.Sprintf("gr%d-%da", pid, n), fmt.Sprintf("gr%d-%db", pid, n)
	if err := v.run("link", "add", va, "netns", v.names[0], "type", "veth", "peer", "name", vb, "netns", v.names[1]); err != nil {
		return v, err
	}
	v.DevA, v.DevB = va, vb
	for i, end := range []struct {
		dev  string
		addr netip.Prefix
	}{{va, a}, {vb, b}} {
		ns := v.names[i]
		for _, args := range [][]string{
			{"addr", "add", end.addr.String(), "dev", end.dev},
			{"link", "set", "dev", end.dev, "addrgenmode", "none"},
			{"link", "set", "dev", end.dev, "mtu", strconv.Itoa(mtu), "up"},
			{"link", "set", "dev", "lo", "up"},
		} {
			if err := v.run(append([]string{"-n", ns}, args...)...); err != nil {
				return v, err
			}
		}
	}
	if v.NSA, err = Open("/run/netns/" + v.names[0]); err != nil {
		return v, err
	}
	if v.NSB, err = Open("/run/netns/" + v.names[1]); err != nil {
		return v, err
	}
	return v, nil
}

// Close closes the namespace files and deletes the namespaces, which
// takes the veth pair with them once the sockets made inside are closed.
func (v *Veth) Close() error {
	errs := []error{v.NSA.Close(), v.NSB.Close()}
	v.NSA, v.NSB = nil, nil
	for i, name := range v.names {
		if name != "" {
			errs = append(errs, v.run("netns", "del", name))
			v.names[i] = ""
		}
	}
	return errors.Join(errs...)
}

// Command returns the command that runs name with args inside the first
// namespace, or inside the second if inB: `ip netns exec NS name args...`,
// which enters the namespace and then becomes the program, so that the
// process's CPU time is the program's.
func (v *Veth) Command(inB bool, name string, args ...string) *exec.Cmd {
	ns := v.names[0]
	if inB {
		ns = v.names[1]
	}
	return exec.Command(v.ip, append([]string{"netns", "exec", ns, name}, args...)...)
}

// run runs the ip command with a timeout; its error includes the output.
func (v *Veth) run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, v.ip, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
