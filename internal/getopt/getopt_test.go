package getopt

import (
	"reflect"
	"strings"
	"testing"
)

var specs = []Spec{Arg('s', "size"), Flag('e', "events"), Flag('a', "all"), Arg(0, "report_gbits_x"),
	Flag(0, "report_gbits"), Arg('D', "duration"), Flag(0, "run_infinitely")}

func TestParse(t *testing.T) {
	type kv struct{ Name, Arg string }
	for _, tc := range []struct {
		args     []string
		opts     []kv
		operands []string
	}{
		{[]string{"-s", "64", "host"}, []kv{{"-s", "64"}}, []string{"host"}},
		{[]string{"-s64", "-ea"}, []kv{{"-s", "64"}, {"-e", ""}, {"-a", ""}}, nil},
		{[]string{"-eas", "8"}, []kv{{"-e", ""}, {"-a", ""}, {"-s", "8"}}, nil},
		{[]string{"host", "--size=4096", "--ev"}, []kv{{"--size", "4096"}, {"--events", ""}}, []string{"host"}},
		{[]string{"--size", "7", "--", "-e"}, []kv{{"--size", "7"}}, []string{"-e"}},
		{[]string{"--report_gbits"}, []kv{{"--report_gbits", ""}}, nil}, // exact match beats a longer name
		{[]string{"--run"}, []kv{{"--run_infinitely", ""}}, nil},
	} {
		opts, operands, err := Parse(tc.args, specs)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		var got []kv
		for _, o := range opts {
			got = append(got, kv{o.Name, o.Arg})
		}
		if !reflect.DeepEqual(got, tc.opts) || !reflect.DeepEqual(operands, tc.operands) {
			t.Errorf("%q: got %v %q, want %v %q", tc.args, got, operands, tc.opts, tc.operands)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for args, want := range map[string][]string{
		"invalid option -- 'x'":                       {"-x"},
		"option requires an argument -- 's'":          {"-es"},
		"option '--size' requires an argument":        {"--size"},
		"option '--events' doesn't allow an argument": {"--events=1"},
		"unrecognized option '--nope'":                {"--nope"},
		"option '--report' is ambiguous":              {"--report"},
	} {
		_, _, err := Parse(want, specs)
		if err == nil || err.Error() != args {
			t.Errorf("%q: got %v, want %q", want, err, args)
		}
	}
}

// FuzzParse splits arbitrary command lines (arguments separated by NUL
// bytes): whatever Parse accepts names options of the table, gives
// arguments only to options that take one, and keeps every operand as
// it was written and in order.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"-s\x0064\x00host", "-s64\x00-ea", "host\x00--size=4096\x00--ev", "--size\x007\x00--\x00-e", "--run", "-eas\x008", "--report_gbits"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		opts, operands, err := Parse(args, specs)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: empty error", args)
			}
			return
		}
		for _, o := range opts {
			ours := false
			for k := range specs {
				ours = ours || o.Spec == &specs[k]
			}
			if !ours {
				t.Fatalf("%q: option %+v is not one of the table's", args, o)
			}
			if !o.Spec.HasArg && o.Arg != "" {
				t.Fatalf("%q: %s takes no argument but got %q", args, o.Name, o.Arg)
			}
			if o.Name != "-"+string(o.Spec.Short) && o.Name != "--"+o.Spec.Long {
				t.Fatalf("%q: option named %q for %+v", args, o.Name, *o.Spec)
			}
		}
		// The operands are a subsequence of the arguments.
		j := 0
		for _, op := range operands {
			for j < len(args) && args[j] != op {
				j++
			}
			if j == len(args) {
				t.Fatalf("%q: operand %q is not an argument, or out of order (%q)", args, op, operands)
			}
			j++
		}
	})
}
