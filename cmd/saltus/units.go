package main

import (
	"errors"
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

// D returns d as a time.Duration.
func (d duration) D() time.Duration { return time.Duration(d) }

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
