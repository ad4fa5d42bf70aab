// Package getopt splits a command line as GNU getopt_long does, so that
// goroce's twins of the rdma-core and perftest tools accept the same
// spellings as the C programs: bundled short options ("-ec", "-s64",
// "-s 64"), long options abbreviated to a unique prefix ("--si=64",
// "--size 64"), operands anywhere, and "--" to end the options.
package getopt

import (
	"fmt"
	"strings"
)

// Spec is one option.
type Spec struct {
	Short  byte   // 0 for a long-only option
	Long   string // "" for a short-only option
	HasArg bool
}

// Opt is one option found on the command line.
type Opt struct {
	Spec *Spec
	Name string // as written, for messages: "-s" or "--size"
	Arg  string
}

// Parse splits args (without the program name) into options and operands.
// Its errors read as glibc's getopt messages do.
func Parse(args []string, specs []Spec) (opts []Opt, operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return opts, append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			s, err := lookupLong(specs, name)
			if err != nil {
				return nil, nil, err
			}
			o := Opt{Spec: s, Name: "--" + s.Long}
			switch {
			case s.HasArg && hasVal:
				o.Arg = val
			case s.HasArg:
				if i+1 == len(args) {
					return nil, nil, fmt.Errorf("option '--%s' requires an argument", s.Long)
				}
				i++
				o.Arg = args[i]
			case hasVal:
				return nil, nil, fmt.Errorf("option '--%s' doesn't allow an argument", s.Long)
			}
			opts = append(opts, o)
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				s := lookupShort(specs, a[j])
				if s == nil {
					return nil, nil, fmt.Errorf("invalid option -- '%c'", a[j])
				}
				o := Opt{Spec: s, Name: "-" + string(a[j])}
				if s.HasArg {
					if j+1 < len(a) {
						o.Arg = a[j+1:]
					} else if i+1 < len(args) {
						i++
						o.Arg = args[i]
					} else {
						return nil, nil, fmt.Errorf("option requires an argument -- '%c'", a[j])
					}
					opts = append(opts, o)
					break
				}
				opts = append(opts, o)
			}
		default:
			operands = append(operands, a)
		}
	}
	return opts, operands, nil
}

func lookupShort(specs []Spec, c byte) *Spec {
	for i := range specs {
		if specs[i].Short != 0 && specs[i].Short == c {
			return &specs[i]
		}
	}
	return nil
}

// lookupLong finds a long option by its name or a unique prefix of it.
func lookupLong(specs []Spec, name string) (*Spec, error) {
	var found *Spec
	for i := range specs {
		switch {
		case specs[i].Long == "":
		case specs[i].Long == name:
			return &specs[i], nil
		case name != "" && strings.HasPrefix(specs[i].Long, name):
			if found != nil {
				return nil, fmt.Errorf("option '--%s' is ambiguous", name)
			}
			found = &specs[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("unrecognized option '--%s'", name)
	}
	return found, nil
}

// Arg is an option that takes an argument.
func Arg(short byte, long string) Spec { return Spec{Short: short, Long: long, HasArg: true} }

// Flag is an option without an argument.
func Flag(short byte, long string) Spec { return Spec{Short: short, Long: long} }
