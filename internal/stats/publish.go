package stats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The counters file of a device, in the run directory:
//
//	offset 0   "GOROCE\x00\x01"   magic and format version
//	offset 8   pid                of the process that owns the device
//	offset 16  number of counters
//	offset 24  device name, NUL-padded to 40 bytes
//	offset 64  the counters, uint64 each in host byte order, in Counter order
//
// The owner maps it read-write and increments in place; readers map it
// read-only. The file is removed when the device closes; files of dead
// processes are ignored (and removed) by List.
const (
	magic      = "GOROCE\x00\x01"
	headerLen  = 64
	nameLen    = 40
	fileSuffix = ".stats"
)

// Dir returns the run directory: $GOROCE_RUN_DIR, or goroce-<uid> in the
// system's temporary directory.
func Dir() string {
	if d := os.Getenv("GOROCE_RUN_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "goroce-"+strconv.Itoa(os.Getuid()))
}

// Published are counters in a mapped file.
type Published struct {
	*Counters
	path string
	mem  []byte
}

// Publish creates the counters file of device name and returns counters
// that live in it. Callers that cannot publish (a read-only file system)
// fall back to New.
func Publish(name string) (*Published, error) {
	dir := Dir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The pid keeps apart devices of one address in different network
	// namespaces, which share the run directory.
	path := filepath.Join(dir, fileName(name+"."+strconv.Itoa(os.Getpid())))
	// The file is made whole under a temporary name and renamed into
	// place: a reader (List, in another process) that maps a file shorter
	// than the counters would die of SIGBUS.
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := headerLen + 8*int(NumCounters)
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	copy(mem, magic)
	binary.NativeEndian.PutUint64(mem[8:], uint64(os.Getpid()))
	binary.NativeEndian.PutUint64(mem[16:], uint64(NumCounters))
	copy(mem[24:24+nameLen], name)
	if err := os.Rename(tmp, path); err != nil {
		unix.Munmap(mem)
		os.Remove(tmp)
		return nil, err
	}
	return &Published{Counters: fromBytes(mem[headerLen:]), path: path, mem: mem}, nil
}

// fileName turns a device name into a file name ("goroce_::1" has colons).
func fileName(name string) string {
	return strings.NewReplacer("/", "_", ":", "_").Replace(name) + fileSuffix
}

// Close unmaps and removes the file. The counters must not be used after.
func (p *Published) Close() error {
	err := unix.Munmap(p.mem)
	if rerr := os.Remove(p.path); err == nil {
		err = rerr
	}
	return err
}

// Device is one published device's counters, as another process sees them.
type Device struct {
	Name     string
	PID      int
	Counters Snapshot
}

// List reads every live device's counters in the run directory, sorted by
// name. Files of processes that no longer exist are removed.
func List() ([]Device, error) {
	paths, err := filepath.Glob(filepath.Join(Dir(), "*"+fileSuffix))
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, p := range paths {
		d, err := read(p)
		if errors.Is(err, errStale) {
			os.Remove(p)
			continue
		}
		if err != nil {
			continue // being created, or not ours
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var errStale = errors.New("stats: owner process is gone")

func read(path string) (Device, error) {
	f, err := os.Open(path)
	if err != nil {
		return Device{}, err
	}
	defer f.Close()
	size := headerLen + 8*int(NumCounters)
	// Never map past the end of the file (SIGBUS): files of an older
	// layout, or not ours, may be shorter.
	if fi, err := f.Stat(); err != nil || fi.Size() < int64(size) {
		return Device{}, fmt.Errorf("stats: %s: not a counters file of this version", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return Device{}, err
	}
	defer unix.Munmap(mem)
	if string(mem[:8]) != magic || binary.NativeEndian.Uint64(mem[16:]) != uint64(NumCounters) {
		return Device{}, fmt.Errorf("stats: %s: not a counters file of this version", path)
	}
	d := Device{PID: int(binary.NativeEndian.Uint64(mem[8:]))}
	d.Name = string(bytes.TrimRight(mem[24:24+nameLen], "\x00"))
	if err := syscall.Kill(d.PID, 0); errors.Is(err, syscall.ESRCH) {
		return d, errStale
	}
	d.Counters = fromBytes(mem[headerLen:]).Snapshot()
	return d, nil
}
