package fault

import (
	"strconv"
	"strings"
	"time"
)

// Parse parses a fault specification, the form tools take on their
// command line. It is a comma-separated list of items, each at most once
// except rule:
//
//	drop=P      Drop           P: a percentage ("1%", "0.1%") or a fraction ("0.01")
//	dup=P       Duplicate
//	reorder=P   Reorder
//	window=N    ReorderWindow
//	corrupt=P   Corrupt
//	ce=P        CEMark
//	delay=D     Delay          D: a Go duration ("1ms", "200us")
//	jitter=D    Jitter
//	limit=N     Limit
//	seed=N      Seed           N: decimal, or hexadecimal with 0x
//	rule=R      appends a Rule to Rules; rules keep their order
//
// A rule is an action followed by conditions, separated by colons:
//
//	R        = action { ":" cond }
//	action   = "drop" | "dup" | "corrupt" | "ce" | "delay=" D
//	cond     = selector | "opcode=" N | "psn=" N | "qp=" N
//	         | "once" | "count=" N | "from=" D | "for=" D
//	selector = "any" | "request" | "response" | "ack" | "nak" | "cnp"
//	         | "send" | "write" | "read" | "atomic"        (see Match)
//
// For example
//
//	drop=1%,dup=1%,reorder=25%,window=8,corrupt=0.1%,delay=1ms,jitter=200us,ce=10%,seed=7
//	rule=drop:ack:for=50ms           drop every ACK for the first 50 ms
//	rule=drop:psn=0x1234:once        drop PSN 0x1234 once
//	rule=corrupt:opcode=0x0a:count=3 corrupt the first three RC RDMA WRITE ONLY packets
//	rule=delay=5ms:read:from=1s      delay READ requests and responses by 5 ms after 1 s
//
// The empty string gives the zero Config. Blanks around items are
// ignored. Errors wrap ErrBad and quote the item at fault.
// Config.String prints a configuration back in this form.
func Parse(spec string) (Config, error) {
	var c Config
	seen := map[string]bool{}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			if strings.TrimSpace(spec) == "" {
				break
			}
			return Config{}, configErr(strconv.Quote(spec), "empty item")
		}
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return Config{}, configErr(strconv.Quote(item), "want key=value")
		}
		if key != "rule" {
			if seen[key] {
				return Config{}, configErr(strconv.Quote(item), "%s given twice", key)
			}
			seen[key] = true
		}
		var err error
		switch key {
		case "drop":
			c.Drop, err = parseProb(val)
		case "dup":
			c.Duplicate, err = parseProb(val)
		case "reorder":
			c.Reorder, err = parseProb(val)
		case "corrupt":
			c.Corrupt, err = parseProb(val)
		case "ce":
			c.CEMark, err = parseProb(val)
		case "window":
			c.ReorderWindow, err = parseInt(val, 1, maxReorderWindow)
		case "limit":
			c.Limit, err = parseInt(val, 1, 1<<30)
		case "delay":
			c.Delay, err = parseDuration(val)
		case "jitter":
			c.Jitter, err = parseDuration(val)
		case "seed":
			c.Seed, err = strconv.ParseUint(val, 0, 64)
			if err != nil {
				err = errString("want an unsigned 64-bit integer")
			}
		case "rule":
			var r Rule
			r, err = parseRule(val)
			c.Rules = append(c.Rules, r)
		default:
			err = errString("unknown key " + strconv.Quote(key))
		}
		if err != nil {
			return Config{}, configErr(strconv.Quote(item), "%v", err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// errString is an error that is only its text, for parse helpers whose
// caller adds the item.
type errString string

func (e errString) Error() string { return string(e) }

func parseProb(s string) (float64, error) {
	num, pct := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, errString("want a probability: a percentage (1%) or a fraction (0.01)")
	}
	if pct {
		v /= 100
	}
	if !(v >= 0 && v <= 1) {
		return 0, errString("probability outside 0..100%")
	}
	return v, nil
}

func parseInt(s string, lo, hi int) (int, error) {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil || v < int64(lo) || v > int64(hi) {
		return 0, errString("want an integer in " + strconv.Itoa(lo) + ".." + strconv.Itoa(hi))
	}
	return int(v), nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errString("want a duration such as 1ms or 200us")
	}
	return d, nil
}

// parseRule parses the value of a rule= item.
func parseRule(s string) (Rule, error) {
	r := Rule{Opcode: -1, PSN: -1, QP: -1}
	parts := strings.Split(s, ":")
	act, arg, hasArg := strings.Cut(parts[0], "=")
	for a := ActDrop; a <= ActCE; a++ {
		if act == a.String() {
			r.Action = a
		}
	}
	switch {
	case r.Action == ActNone:
		return r, errString("unknown action " + strconv.Quote(parts[0]) + " (want drop, dup, corrupt, ce or delay=D)")
	case r.Action == ActDelay && !hasArg:
		return r, errString("action delay needs a duration: delay=5ms")
	case r.Action != ActDelay && hasArg:
		return r, errString("action " + act + " takes no value")
	case r.Action == ActDelay:
		d, err := parseDuration(arg)
		if err != nil || d == 0 {
			return r, errString("action delay needs a duration above zero: delay=5ms")
		}
		r.Delay = d
	}
	seen := map[string]bool{}
	for _, cond := range parts[1:] {
		key, val, hasVal := strings.Cut(cond, "=")
		if m, ok := matchByName(key); ok && !hasVal {
			key = "selector"
			r.Match = m
		}
		if key == "once" && !hasVal {
			key, val, hasVal = "count", "1", true
		}
		if seen[key] {
			return r, errString("condition " + strconv.Quote(cond) + " repeats " + key)
		}
		seen[key] = true
		if key == "selector" {
			continue
		}
		if !hasVal {
			return r, errString("unknown condition " + strconv.Quote(cond))
		}
		var err error
		switch key {
		case "opcode":
			r.Opcode, err = parseInt(val, 0, 0xff)
		case "psn", "qp":
			var v int
			v, err = parseInt(val, 0, maxPSN)
			if key == "psn" {
				r.PSN = int64(v)
			} else {
				r.QP = int64(v)
			}
		case "count":
			r.Count, err = parseInt(val, 1, 1<<30)
		case "from":
			r.From, err = parseDuration(val)
		case "for":
			r.For, err = parseDuration(val)
		default:
			err = errString("unknown condition")
		}
		if err != nil {
			return r, errString("condition " + strconv.Quote(cond) + ": " + err.Error())
		}
	}
	return r, nil
}

func matchByName(name string) (Match, bool) {
	for m := MatchAny; m < matchEnd; m++ {
		if name == m.String() {
			return m, true
		}
	}
	return 0, false
}

// String returns c in Parse's grammar, fields at their zero value
// left out, so that Parse(c.String()) gives c back for every valid c.
// The zero Config prints as "".
func (c Config) String() string {
	var b []string
	if c.Seed != 0 {
		b = append(b, "seed="+strconv.FormatUint(c.Seed, 10))
	}
	for _, p := range []struct {
		key string
		v   float64
	}{{"drop", c.Drop}, {"dup", c.Duplicate}, {"reorder", c.Reorder}} {
		if p.v != 0 {
			b = append(b, p.key+"="+probString(p.v))
		}
	}
	if c.ReorderWindow != 0 {
		b = append(b, "window="+strconv.Itoa(c.ReorderWindow))
	}
	if c.Corrupt != 0 {
		b = append(b, "corrupt="+probString(c.Corrupt))
	}
	if c.CEMark != 0 {
		b = append(b, "ce="+probString(c.CEMark))
	}
	if c.Delay != 0 {
		b = append(b, "delay="+c.Delay.String())
	}
	if c.Jitter != 0 {
		b = append(b, "jitter="+c.Jitter.String())
	}
	if c.Limit != 0 {
		b = append(b, "limit="+strconv.Itoa(c.Limit))
	}
	for _, r := range c.Rules {
		b = append(b, "rule="+r.String())
	}
	return strings.Join(b, ",")
}

// String returns the rule as the value of a Parse rule= item.
func (r Rule) String() string {
	s := r.Action.String()
	if r.Action == ActDelay {
		s += "=" + r.Delay.String()
	}
	if r.Match != MatchAny {
		s += ":" + r.Match.String()
	}
	if r.Opcode >= 0 {
		s += ":opcode=0x" + hex(int64(r.Opcode), 2)
	}
	if r.PSN >= 0 {
		s += ":psn=0x" + hex(r.PSN, 1)
	}
	if r.QP >= 0 {
		s += ":qp=0x" + hex(r.QP, 1)
	}
	switch {
	case r.Count == 1:
		s += ":once"
	case r.Count > 1:
		s += ":count=" + strconv.Itoa(r.Count)
	}
	if r.From != 0 {
		s += ":from=" + r.From.String()
	}
	if r.For != 0 {
		s += ":for=" + r.For.String()
	}
	return s
}

func hex(v int64, width int) string {
	s := strconv.FormatInt(v, 16)
	for len(s) < width {
		s = "0" + s
	}
	return s
}

// probString formats a probability: the shortest percentage that reads
// back as exactly p, else the fraction.
func probString(p float64) string {
	for prec := 1; prec <= 17; prec++ {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(p*100, 'g', prec, 64), 64)
		s := strconv.FormatFloat(v, 'f', -1, 64) + "%"
		if q, err := parseProb(s); err == nil && q == p {
			return s
		}
	}
	return strconv.FormatFloat(p, 'g', -1, 64)
}
