package fault

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseFault(t *testing.T) {
	any := func(r Rule) Rule {
		if r.Opcode == 0 {
			r.Opcode = -1
		}
		if r.PSN == 0 {
			r.PSN = -1
		}
		if r.QP == 0 {
			r.QP = -1
		}
		return r
	}
	for _, tc := range []struct {
		spec  string
		want  Config
		canon string // String of the result; "" means spec itself
	}{
		{"", Config{}, ""},
		{
			"drop=1%,dup=1%,reorder=25%,window=8,corrupt=0.1%,delay=1ms,jitter=200us,ce=10%,seed=7",
			Config{Seed: 7, Drop: 0.01, Duplicate: 0.01, Reorder: 0.25, ReorderWindow: 8, Corrupt: 0.001,
				Delay: time.Millisecond, Jitter: 200 * time.Microsecond, CEMark: 0.1},
			"seed=7,drop=1%,dup=1%,reorder=25%,window=8,corrupt=0.1%,ce=10%,delay=1ms,jitter=200µs",
		},
		{"drop=0.5", Config{Drop: 0.5}, "drop=50%"},
		{" drop=100% , seed=0x10 ", Config{Drop: 1, Seed: 16}, "seed=16,drop=100%"},
		{"limit=10,delay=1h", Config{Limit: 10, Delay: time.Hour}, "delay=1h0m0s,limit=10"},
		{"rule=drop:ack:for=50ms", Config{Rules: []Rule{any(Rule{Action: ActDrop, Match: MatchAck, For: 50 * time.Millisecond})}}, ""},
		{"rule=drop:psn=0x1234:once", Config{Rules: []Rule{any(Rule{Action: ActDrop, PSN: 0x1234, Count: 1})}}, ""},
		{"rule=corrupt:opcode=0x0a:count=3", Config{Rules: []Rule{any(Rule{Action: ActCorrupt, Opcode: 0x0a, Count: 3})}}, ""},
		{"rule=ce:opcode=0", Config{Rules: []Rule{{Action: ActCE, Opcode: 0, PSN: -1, QP: -1}}}, "rule=ce:opcode=0x00"},
		{"rule=drop:psn=4660:count=1", Config{Rules: []Rule{any(Rule{Action: ActDrop, PSN: 0x1234, Count: 1})}}, "rule=drop:psn=0x1234:once"},
		{
			"rule=delay=5ms:read:from=1s:for=2s,rule=dup:nak:qp=0x11,rule=ce:cnp,rule=drop:any",
			Config{Rules: []Rule{
				any(Rule{Action: ActDelay, Delay: 5 * time.Millisecond, Match: MatchRead, From: time.Second, For: 2 * time.Second}),
				any(Rule{Action: ActDup, Match: MatchNAK, QP: 0x11}),
				any(Rule{Action: ActCE, Match: MatchCNP}),
				any(Rule{Action: ActDrop}),
			}},
			"rule=delay=5ms:read:from=1s:for=2s,rule=dup:nak:qp=0x11,rule=ce:cnp,rule=drop",
		},
		{"corrupt=0.0001%", Config{Corrupt: 0.000001}, ""},
		{"drop=0.3", Config{Drop: 0.3}, "drop=30%"},
		{"drop=0.1234567", Config{Drop: 0.1234567}, "drop=12.34567%"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := Parse(tc.spec)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse = %#v\nwant %#v", got, tc.want)
			}
			canon := tc.canon
			if canon == "" {
				canon = tc.spec
			}
			if s := got.String(); s != canon {
				t.Errorf("String = %q, want %q", s, canon)
			}
			back, err := Parse(got.String())
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Errorf("Parse(String()) = %#v, %v; want %#v", back, err, got)
			}
		})
	}
}

// TestFaultStringRoundTrip prints configurations built as structs, with
// probabilities that are not round percentages, and parses them back.
func TestFaultStringRoundTrip(t *testing.T) {
	for _, c := range []Config{
		{Drop: 0.1 + 0.2, Duplicate: 1.0 / 3, Corrupt: math.SmallestNonzeroFloat64, CEMark: 1, Seed: math.MaxUint64},
		{Reorder: 0.07, ReorderWindow: 1 << 16, Jitter: 3 * time.Nanosecond, Limit: 1},
		{Rules: []Rule{{Action: ActDelay, Delay: time.Nanosecond, Opcode: 0xff, PSN: 0xffffff, QP: 0, Count: 1 << 20, From: 1}}},
	} {
		back, err := Parse(c.String())
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", c.String(), back, err, c)
		}
	}
}

func TestParseFaultErrors(t *testing.T) {
	for _, tc := range []struct{ spec, item, why string }{
		{"drop", `"drop"`, "key=value"},
		{"drop=2", `"drop=2"`, "probability"},
		{"drop=101%", `"drop=101%"`, "probability"},
		{"drop=-1%", `"drop=-1%"`, "probability"},
		{"drop=NaN", `"drop=NaN"`, "probability"},
		{"drop=x", `"drop=x"`, "probability"},
		{"drop=1%,drop=2%", `"drop=2%"`, "twice"},
		{"drop=1%,", `"drop=1%,"`, "empty item"},
		{"loss=1%", `"loss=1%"`, "unknown key"},
		{"window=0", `"window=0"`, "integer"},
		{"window=x", `"window=x"`, "integer"},
		{"delay=5", `"delay=5"`, "duration"},
		{"jitter=-1ms", `"jitter=-1ms"`, "duration"},
		{"seed=-1", `"seed=-1"`, "unsigned"},
		{"limit=0", `"limit=0"`, "integer"},
		{"rule=explode", `"rule=explode"`, "unknown action"},
		{"rule=delay:ack", `"rule=delay:ack"`, "needs a duration"},
		{"rule=delay=0s", `"rule=delay=0s"`, "above zero"},
		{"rule=drop=5ms", `"rule=drop=5ms"`, "takes no value"},
		{"rule=drop:acks", `"rule=drop:acks"`, "unknown condition"},
		{"rule=drop:psn=0x1000000", `"rule=drop:psn=0x1000000"`, "psn=0x1000000"},
		{"rule=drop:opcode=256", `"rule=drop:opcode=256"`, "0..255"},
		{"rule=drop:ack:nak", `"rule=drop:ack:nak"`, "repeats"},
		{"rule=drop:once:count=2", `"rule=drop:once:count=2"`, "repeats"},
		{"rule=drop:for=1", `"rule=drop:for=1"`, "duration"},
		{"rule=drop:wibble=1", `"rule=drop:wibble=1"`, "unknown condition"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			c, err := Parse(tc.spec)
			if err == nil {
				t.Fatalf("Parse = %v, nil; want an error", c)
			}
			if !errors.Is(err, ErrBad) {
				t.Errorf("error %q does not wrap ErrBad", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.item) || !strings.Contains(msg, tc.why) {
				t.Errorf("error %q; want it to name %s and say %q", msg, tc.item, tc.why)
			}
		})
	}
}

func TestFaultValidate(t *testing.T) {
	ok := Rule{Action: ActDrop, Opcode: -1, PSN: -1, QP: -1}
	rule := func(f func(*Rule)) Config {
		r := ok
		f(&r)
		return Config{Rules: []Rule{ok, r}}
	}
	for _, tc := range []struct {
		name string
		c    Config
		want string // "" means valid
	}{
		{"zero", Config{}, ""},
		{"good rule", Config{Rules: []Rule{ok}}, ""},
		{"drop", Config{Drop: 1.5}, "Drop"},
		{"dup NaN", Config{Duplicate: math.NaN()}, "Duplicate"},
		{"ce", Config{CEMark: -0.1}, "CEMark"},
		{"window", Config{ReorderWindow: -1}, "ReorderWindow"},
		{"delay", Config{Delay: -1}, "Delay"},
		{"limit", Config{Limit: -1}, "Limit"},
		{"zero rule", Config{Rules: []Rule{{}}}, "Rules[0]"},
		{"action", rule(func(r *Rule) { r.Action = 77 }), "Rules[1]"},
		{"match", rule(func(r *Rule) { r.Match = 77 }), "Match"},
		{"opcode", rule(func(r *Rule) { r.Opcode = 256 }), "Opcode"},
		{"psn", rule(func(r *Rule) { r.PSN = -2 }), "PSN"},
		{"qp", rule(func(r *Rule) { r.QP = 1 << 24 }), "QP"},
		{"count", rule(func(r *Rule) { r.Count = -1 }), "Count"},
		{"window", rule(func(r *Rule) { r.For = -1 }), "From/For"},
		{"delay without action", rule(func(r *Rule) { r.Delay = 1 }), "Delay"},
		{"delay action without delay", rule(func(r *Rule) { r.Action = ActDelay }), "Delay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Errorf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrBad) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v; want ErrBad naming %s", err, tc.want)
			}
		})
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{
		"drop=1%,dup=1%,reorder=25%,window=8,corrupt=0.1%,delay=1ms,jitter=200us,ce=10%,seed=7",
		"rule=drop:ack:for=50ms", "rule=drop:psn=0x1234:once", "rule=corrupt:opcode=0x0a:count=3",
		"rule=delay=5ms:read:from=1s", "limit=3",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		c, err := Parse(spec)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse(%q) gave an invalid config: %v", spec, err)
		}
		back, err := Parse(c.String())
		if err != nil || !reflect.DeepEqual(back, c) {
			t.Fatalf("Parse(%q).String() = %q parses to %#v, %v; want %#v", spec, c.String(), back, err, c)
		}
	})
}
