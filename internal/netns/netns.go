// Package netns makes sockets inside another network namespace, so that one
// process can hold devices in several: goroce bench runs its two ends in
// two namespaces joined by a veth pair this way.
//
// A socket belongs to the namespace of the thread that created it, for its
// whole life, whichever thread uses it afterwards; so only the creation
// has to happen inside. NS.Do runs a function on an OS thread that has
// entered the namespace (setns(2), which needs CAP_SYS_ADMIN) and throws
// that thread away afterwards, so that no other goroutine ever runs in it.
//
// Veth creates two throwaway namespaces joined by a veth pair with the ip
// command (iproute2), and deletes them again.
package netns

import (
	"fmt"
	"os"
	"os/exec"
)

// NS is an open network namespace. The nil *NS is the process's own: Do
// runs its function directly.
type NS struct {
	f *os.File
}

// Name returns the path the namespace was opened by ("" for the nil NS).
func (n *NS) Name() string {
	if n == nil {
		return ""
	}
	return n.f.Name()
}

// Close closes the namespace file. Sockets made inside stay open; the
// namespace lives as long as they, its name or a process in it do.
func (n *NS) Close() error {
	if n == nil {
		return nil
	}
	return n.f.Close()
}

// Tool finds a command on PATH or in /usr/sbin and /sbin, where ip and
// nft live but which a user's PATH may lack.
func Tool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("netns: %s not found on PATH, in /usr/sbin or /sbin", name)
}
