package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// duration is a time.Duration that flags and YAML read and write as Go
// duration text ("10s", "1h0m0s"); yaml.v3 alone would write nanoseconds.
type duration time.Duration

// String writes Go duration text without zero tails: "1m", "1h", "1h30m"
// rather than "1m0s", "1h0m0s", "1h30m0s".
func (d duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Set parses Go duration text; a bare number is refused, since its unit
// would be a guess.
func (d *duration) Set(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a duration with a unit, like 10s, 500ms or 1h, got %q", s)
	}
	*d = duration(v)
	return nil
}

func (d duration) MarshalYAML() (any, error) { return d.String(), nil }

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a duration with a unit, like 10s, 500ms or 1h")
	}
	return d.Set(n.Value)
}

// byteSize is a size in bytes that flags and YAML read and write with a
// unit: "16MiB", "512KiB", "65536".
type byteSize int64

// Binary units are written; decimal ones (KB = 1000 bytes, as in SI) are
// read too.
var byteUnits = []struct {
	name string
	mult int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// String writes the largest binary unit that divides the size exactly.
func (b byteSize) String() string {
	for _, u := range byteUnits[:3] {
		if b != 0 && b%byteSize(u.mult) == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Set parses a non-negative integer with an optional unit, case
// insensitive: B, KiB, MiB, GiB (powers of 1024), KB, MB, GB (powers of
// 1000). No unit means bytes.
func (b *byteSize) Set(s string) error {
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func parseByteSize(s string) (byteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 || i > 19 {
		return 0, fmt.Errorf("want a size like 16MiB, 512KiB or 65536 (bytes), got %q", s)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a size like 16MiB, 512KiB or 65536 (bytes), got %q", s)
	}
	unit := strings.TrimSpace(t[i:])
	mult := int64(1)
	if unit != "" {
		mult = 0
		for _, u := range byteUnits {
			if strings.EqualFold(unit, u.name) {
				mult = u.mult
				break
			}
		}
		if mult == 0 {
			return 0, fmt.Errorf("unknown size unit %q in %q: want B, KiB, MiB, GiB, KB, MB or GB", unit, s)
		}
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return byteSize(n * mult), nil
}

func (b byteSize) MarshalYAML() (any, error) { return b.String(), nil }

func (b *byteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a size like 16MiB, 512KiB or 65536 (bytes)")
	}
	return b.Set(n.Value)
}

// stringList is a repeatable flag; each use may also hold several
// comma-separated values.
type stringList []string

func (l *stringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *stringList) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// value is one configuration key's field, as its flag sets it and as the
// YAML file sets it (decode) and --dry-run writes it (yaml).
type value interface {
	flag.Value
	decode(n *yaml.Node) error
	yaml() any
}

// The values of the component configs' field types.
type (
	strV    struct{ p *string }
	intV    struct{ p *int }
	boolV   struct{ p *bool }
	floatV  struct{ p *float64 }
	durV    struct{ p *time.Duration } // Go duration text ("10s")
	sizeV   struct{ p *int }           // a byteSize ("16MiB")
	size64V struct{ p *int64 }
	listV   struct { // the repeatable --backend: its first use replaces the file's list
		p   *[]string
		set *bool // a flag set's own: Set ran
		// whole: each use is one value, not split at commas (values
		// that hold commas: --k8s-model-selector's label selectors).
		whole bool
	}
)

func (v strV) String() string               { return deref(v.p) }
func (v strV) Set(s string) error           { *v.p = s; return nil }
func (v strV) decode(n *yaml.Node) error    { return n.Decode(v.p) }
func (v strV) yaml() any                    { return *v.p }
func (v intV) String() string               { return strconv.Itoa(deref(v.p)) }
func (v intV) decode(n *yaml.Node) error    { return n.Decode(v.p) }
func (v intV) yaml() any                    { return *v.p }
func (v boolV) String() string              { return strconv.FormatBool(deref(v.p)) }
func (v boolV) IsBoolFlag() bool            { return true }
func (v boolV) decode(n *yaml.Node) error   { return n.Decode(v.p) }
func (v boolV) yaml() any                   { return *v.p }
func (v floatV) String() string             { return strconv.FormatFloat(deref(v.p), 'g', -1, 64) }
func (v floatV) decode(n *yaml.Node) error  { return n.Decode(v.p) }
func (v floatV) yaml() any                  { return *v.p }
func (v durV) String() string               { return duration(deref(v.p)).String() }
func (v durV) yaml() any                    { return v.String() }
func (v sizeV) String() string              { return byteSize(deref(v.p)).String() }
func (v sizeV) yaml() any                   { return v.String() }
func (v size64V) String() string            { return byteSize(deref(v.p)).String() }
func (v size64V) yaml() any                 { return v.String() }
func (v listV) String() string              { return strings.Join(deref(v.p), v.sep()) }
func (v listV) yaml() any                   { return append([]string{}, *v.p...) } // [], not null
func (v listV) decode(n *yaml.Node) error   { return n.Decode(v.p) }
func (v size64V) decode(n *yaml.Node) error { return decodeVia(n, (*byteSize)(v.p)) }
func (v durV) decode(n *yaml.Node) error    { return decodeVia(n, (*duration)(v.p)) }

// deref is *p, or the zero value for a nil p (flag.isZeroValue calls
// String on a zero Value).
func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func decodeVia(n *yaml.Node, u yaml.Unmarshaler) error { return u.UnmarshalYAML(n) }

func (v intV) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 0, strconv.IntSize)
	if err != nil {
		return errors.New("want an integer")
	}
	*v.p = int(n)
	return nil
}

func (v boolV) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v.p = b
	return nil
}

func (v floatV) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return errors.New("want a number")
	}
	*v.p = f
	return nil
}

func (v durV) Set(s string) error { return (*duration)(v.p).Set(s) }

func (v size64V) Set(s string) error { return (*byteSize)(v.p).Set(s) }

// sizeV's sizes fit an int: the keys' bounds (Validate) are at most 1GiB.
func (v sizeV) Set(s string) error {
	b, err := parseByteSize(s)
	if err != nil {
		return err
	}
	if int64(b) > math.MaxInt32 {
		return fmt.Errorf("size %q is too large", s)
	}
	*v.p = int(b)
	return nil
}

func (v sizeV) decode(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a size like 16MiB, 512KiB or 65536 (bytes)")
	}
	return v.Set(n.Value)
}

// Set adds s's comma-separated values to the list (s whole, trimmed, if
// v.whole); the first Set of a flag set replaces what the file gave.
func (v listV) Set(s string) error {
	if !*v.set {
		*v.set = true
		*v.p = nil
	}
	if v.whole {
		if s = strings.TrimSpace(s); s != "" {
			*v.p = append(*v.p, s)
		}
		return nil
	}
	return (*stringList)(v.p).Set(s)
}

// sep joins the values in String (the help's default, the reload's
// comparison): "; " where values hold commas, so that two values never
// read as one.
func (v listV) sep() string {
	if v.whole {
		return "; "
	}
	return ","
}
