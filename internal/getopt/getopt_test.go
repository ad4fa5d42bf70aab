package getopt

import (
	"reflect"
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
