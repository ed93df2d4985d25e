package keys

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bounds of a key list (a file, or SALTUS_API_KEYS). A list past one is
// refused whole, naming the bound: a key set is configuration, not data
// that grows with traffic, and every key costs a few hundred bytes and up
// to eight metric series.
const (
	MaxKeys      = 100_000  // keys in the file and the environment together
	MaxFileBytes = 32 << 20 // 100,000 keys of ~300 bytes
	MaxNameLen   = 64       // a key's name, a metric label value
	MaxModels    = 1024     // models one key may name
	MaxModelLen  = 256      // one model name
	// MaxRPM and MaxTPM bound the limits: past them a limit would not
	// be a limit (and the limiter's arithmetic keeps its precision).
	MaxRPM    = 100_000_000
	MaxTPM    = 10_000_000_000
	MinWeight = 0.001 // the gateway queue's clamp (upstream/queue)
	MaxWeight = 1000
)

// HashPrefix starts every hash of a key list: the algorithm, so that
// another can be added without ambiguity.
const HashPrefix = "sha256:"

// Spec is one key as its list gives it.
type Spec struct {
	// Name is the tenant: the key's name in metrics, logs, the gateway
	// queue's fair share and rate-limit messages. 1 to 64 of
	// [A-Za-z0-9._-], starting with a letter or digit; unique.
	Name string
	// Hash is the SHA-256 of the secret clients present; unique.
	Hash [32]byte
	// Models the key may use; empty: every model.
	Models []string
	// RPM and TPM are requests and tokens (prompt + completion) per
	// minute; 0: unlimited.
	RPM, TPM int64
	// Weight is the key's fair share in the gateway queue against the
	// other keys (1 by default; 2 gets twice the turns of 1).
	Weight float64
	// Line is where the key starts in its list (errors and logs).
	Line int
}

// HashSecret is the hash under which a secret is kept and looked up.
func HashSecret(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// FormatHash writes h as a key list's hash field: "sha256:<hex>".
func FormatHash(h [32]byte) string { return HashPrefix + hex.EncodeToString(h[:]) }

// ParseHash reads a hash field ("sha256:" and 64 hex digits, either
// case).
func ParseHash(s string) ([32]byte, error) {
	var h [32]byte
	rest, ok := strings.CutPrefix(s, HashPrefix)
	if !ok {
		return h, fmt.Errorf("want %s<64 hex digits> (saltus keys hash < secret prints it), got %.80q", HashPrefix, s)
	}
	if len(rest) != 64 {
		return h, fmt.Errorf("want 64 hex digits after %s, got %d", HashPrefix, len(rest))
	}
	if _, err := hex.Decode(h[:], []byte(rest)); err != nil {
		return h, fmt.Errorf("want 64 hex digits after %s: %v", HashPrefix, err)
	}
	return h, nil
}

// CheckName reports whether name is a valid key name.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("want 1 to %d characters, got %d", MaxNameLen, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("want letters, digits, '.', '_' and '-', starting with a letter or digit; got %.80q", name)
		}
	}
	return nil
}

// maxErrors bounds the errors one Parse reports; the rest are counted.
const maxErrors = 20

// Parse reads a key list: a YAML sequence of mappings, or the same as
// JSON (a JSON array of objects), each with the fields name, hash,
// models, rpm, tpm and weight (see Spec). src names the list in errors
// ("keys.yaml", "SALTUS_API_KEYS"). An empty list (empty text, only
// comments, `[]`) is valid: no key is accepted. Every error names the
// line, the key's index and the field. Any goroutine.
func Parse(src string, data []byte) ([]Spec, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, over the bound of %d", src, len(data), MaxFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: %s", src, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: want one YAML document (a list of keys), found more", src)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil // only comments
	}
	if root.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s: line %d: want a list of keys (- name: …, hash: sha256:…)", src, root.Line)
	}
	if len(root.Content) > MaxKeys {
		return nil, fmt.Errorf("%s: %d keys, over the bound of %d", src, len(root.Content), MaxKeys)
	}
	p := parser{src: src, names: map[string]int{}, hashes: map[[32]byte]int{}}
	out := make([]Spec, 0, len(root.Content))
	for i, n := range root.Content {
		if s, ok := p.key(i, n); ok {
			out = append(out, s)
		}
	}
	return out, p.err()
}

// parser collects one list's errors and what must be unique.
type parser struct {
	src     string
	errs    []error
	dropped int
	names   map[string]int   // name → line
	hashes  map[[32]byte]int // hash → line
}

func (p *parser) errorf(line, i int, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.dropped++
		return
	}
	where := fmt.Sprintf("keys[%d]", i)
	if field != "" {
		where += "." + field
	}
	p.errs = append(p.errs, fmt.Errorf("%s: line %d: %s: %s", p.src, line, where, fmt.Sprintf(format, args...)))
}

func (p *parser) err() error {
	if p.dropped > 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: and %d more errors", p.src, p.dropped))
	}
	return errors.Join(p.errs...)
}

// key reads the i-th key of the list.
func (p *parser) key(i int, n *yaml.Node) (Spec, bool) {
	s := Spec{Weight: 1, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, i, "", "want a mapping (name: …, hash: sha256:…)")
		return s, false
	}
	before := len(p.errs) + p.dropped
	seen := map[string]int{}
	var hasName, hasHash bool
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		field := k.Value
		if prev, dup := seen[field]; dup {
			p.errorf(k.Line, i, field, "repeats the field of line %d", prev)
			continue
		}
		seen[field] = k.Line
		if v.Kind == yaml.AliasNode {
			p.errorf(v.Line, i, field, "YAML aliases are not supported in a key list")
			continue
		}
		switch field {
		case "name":
			hasName = true
			if str, ok := p.str(i, field, v); ok {
				if err := CheckName(str); err != nil {
					p.errorf(v.Line, i, field, "%v", err)
				} else {
					s.Name = str
				}
			}
		case "hash":
			hasHash = true
			if str, ok := p.str(i, field, v); ok {
				h, err := ParseHash(str)
				if err != nil {
					p.errorf(v.Line, i, field, "%v", err)
				}
				s.Hash = h
			}
		case "models":
			s.Models = p.models(i, v)
		case "rpm":
			s.RPM = p.limit(i, field, v, MaxRPM)
		case "tpm":
			s.TPM = p.limit(i, field, v, MaxTPM)
		case "weight":
			var w float64
			if v.Kind != yaml.ScalarNode || v.Decode(&w) != nil || math.IsNaN(w) || w < MinWeight || w > MaxWeight {
				p.errorf(v.Line, i, field, "want a number from %v to %v, got %.40q", MinWeight, MaxWeight, v.Value)
				continue
			}
			s.Weight = w
		case "key", "secret", "api_key", "api-key", "token":
			p.errorf(k.Line, i, field, "secrets are not kept in a key list: give hash: %s<hex> instead (saltus keys hash < secret prints it)", HashPrefix)
		default:
			p.errorf(k.Line, i, field, "unknown field (want name, hash, models, rpm, tpm, weight)")
		}
	}
	if !hasName {
		p.errorf(n.Line, i, "name", "missing")
	}
	if !hasHash {
		p.errorf(n.Line, i, "hash", "missing")
	}
	if len(p.errs)+p.dropped > before {
		return s, false
	}
	if prev, dup := p.names[s.Name]; dup {
		p.errorf(n.Line, i, "name", "%q repeats the name of line %d", s.Name, prev)
		return s, false
	}
	if prev, dup := p.hashes[s.Hash]; dup {
		p.errorf(n.Line, i, "hash", "repeats the hash of line %d (two keys with one secret)", prev)
		return s, false
	}
	p.names[s.Name], p.hashes[s.Hash] = n.Line, n.Line
	return s, true
}

// str reads a string scalar.
func (p *parser) str(i int, field string, v *yaml.Node) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		p.errorf(v.Line, i, field, "want a string")
		return "", false
	}
	return v.Value, true
}

// limit reads a requests or tokens per minute: an integer from 0 to max.
func (p *parser) limit(i int, field string, v *yaml.Node, max int64) int64 {
	var n int64
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&n) != nil || n < 0 || n > max {
		p.errorf(v.Line, i, field, "want an integer from 0 (unlimited) to %d, got %.40q", max, v.Value)
		return 0
	}
	return n
}

// models reads the list of models a key may use.
func (p *parser) models(i int, v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.errorf(v.Line, i, "models", "want a list of model names (empty or absent: every model)")
		return nil
	}
	if len(v.Content) > MaxModels {
		p.errorf(v.Line, i, "models", "%d models, over the bound of %d", len(v.Content), MaxModels)
		return nil
	}
	var out []string
	for j, m := range v.Content {
		f := fmt.Sprintf("models[%d]", j)
		str, ok := p.str(i, f, m)
		if !ok {
			continue
		}
		if str == "" || len(str) > MaxModelLen {
			p.errorf(m.Line, i, f, "want 1 to %d characters, got %d", MaxModelLen, len(str))
			continue
		}
		out = append(out, str)
	}
	return out
}
