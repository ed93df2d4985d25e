package keys

import (
	"strings"
	"testing"
)

// hashOf is the hash field of secret.
func hashOf(secret string) string { return FormatHash(HashSecret(secret)) }

func TestHash(t *testing.T) {
	t.Parallel()
	// sha256("test"), as `printf test | sha256sum` prints it.
	const want = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	if got := hashOf("test"); got != want {
		t.Fatalf("FormatHash(HashSecret(test)) = %s, want %s", got, want)
	}
	h, err := ParseHash(strings.ToUpper(want[:7]) + strings.ToUpper(want[7:]))
	if err == nil {
		t.Fatalf("ParseHash accepted an upper-case prefix: %x", h)
	}
	h, err = ParseHash("sha256:" + strings.ToUpper(want[7:]))
	if err != nil || h != HashSecret("test") {
		t.Fatalf("ParseHash(upper-case hex) = %x, %v", h, err)
	}
	for _, bad := range []string{"", "test", "sha256:", "sha256:9f86", "md5:" + want[7:], want + "00", "sha256:" + strings.Repeat("g", 64)} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) accepted it", bad)
		}
	}
}

func TestParseGood(t *testing.T) {
	t.Parallel()
	yml := "# the keys\n" +
		"- name: team-a\n" +
		"  hash: " + hashOf("sk-a") + "\n" +
		"  models: [llama3, sql-lora]\n" +
		"  rpm: 600\n" +
		"  tpm: 200000\n" +
		"  weight: 2.5\n" +
		"- name: b.2_x\n" +
		"  hash: " + hashOf("sk-b") + "\n"
	js := `[{"name":"team-a","hash":"` + hashOf("sk-a") + `","models":["llama3","sql-lora"],"rpm":600,"tpm":200000,"weight":2.5},` +
		`{"name":"b.2_x","hash":"` + hashOf("sk-b") + `"}]`
	for name, src := range map[string]string{"yaml": yml, "json": js} {
		t.Run(name, func(t *testing.T) {
			specs, err := Parse("keys", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			if len(specs) != 2 {
				t.Fatalf("%d keys, want 2", len(specs))
			}
			a, b := specs[0], specs[1]
			if a.Name != "team-a" || a.Hash != HashSecret("sk-a") || strings.Join(a.Models, ",") != "llama3,sql-lora" || a.RPM != 600 || a.TPM != 200000 || a.Weight != 2.5 {
				t.Errorf("first key %+v", a)
			}
			if b.Name != "b.2_x" || b.Hash != HashSecret("sk-b") || b.Models != nil || b.RPM != 0 || b.TPM != 0 || b.Weight != 1 {
				t.Errorf("second key %+v (want defaults: every model, unlimited, weight 1)", b)
			}
		})
	}
	for _, empty := range []string{"", "# nothing\n", "[]", "---\n"} {
		if specs, err := Parse("keys", []byte(empty)); err != nil || len(specs) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no key, no error", empty, specs, err)
		}
	}
	// The environment's compact form: YAML flow style on one line.
	specs, err := Parse("SALTUS_API_KEYS", []byte(`[{name: ci, hash: "`+hashOf("sk-ci")+`", rpm: 10}]`))
	if err != nil || len(specs) != 1 || specs[0].RPM != 10 {
		t.Errorf("flow style: %+v, %v", specs, err)
	}
}

func TestParseBad(t *testing.T) {
	t.Parallel()
	h := hashOf("sk-a")
	f := func(src, want string) {
		t.Helper()
		_, err := Parse("keys.yaml", []byte(src))
		if err == nil {
			t.Errorf("Parse(%q): no error, want %q", src, want)
			return
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v\nwant it to say %q", src, err, want)
		}
	}
	f("name: a\n", "keys.yaml: line 1: want a list of keys")
	f("- name: a\n", "line 1: keys[0].hash: missing")
	f("- hash: "+h+"\n", "keys[0].name: missing")
	f("- name: a\n  hash: sk-plain\n", "line 2: keys[0].hash: want sha256:")
	f("- name: a\n  hash: "+h+"\n  key: sk-plain\n", "line 3: keys[0].key: secrets are not kept")
	f("- name: a\n  hash: "+h+"\n  tmp: 10\n", "keys[0].tmp: unknown field")
	f("- name: a\n  hash: "+h+"\n  rpm: -1\n", "keys[0].rpm: want an integer from 0")
	f("- name: a\n  hash: "+h+"\n  rpm: 1.5\n", "keys[0].rpm: want an integer")
	f("- name: a\n  hash: "+h+"\n  tpm: lots\n", "keys[0].tpm: want an integer")
	f("- name: a\n  hash: "+h+"\n  weight: 0\n", "keys[0].weight: want a number from 0.001")
	f("- name: a\n  hash: "+h+"\n  models: llama3\n", "keys[0].models: want a list")
	f("- name: a\n  hash: "+h+"\n  models: [\"\"]\n", "keys[0].models[0]: want 1 to")
	f("- name: 'a b'\n  hash: "+h+"\n", "keys[0].name: want letters")
	f("- name: -a\n  hash: "+h+"\n", "keys[0].name: want letters")
	f("- name: "+strings.Repeat("a", 65)+"\n  hash: "+h+"\n", "keys[0].name: want 1 to 64")
	f("- name: a\n  name: b\n  hash: "+h+"\n", "line 2: keys[0].name: repeats the field of line 1")
	f("- name: a\n  hash: "+h+"\n- name: a\n  hash: "+hashOf("x")+"\n", `line 3: keys[1].name: "a" repeats the name of line 1`)
	f("- name: a\n  hash: "+h+"\n- name: b\n  hash: "+h+"\n", "line 3: keys[1].hash: repeats the hash of line 1")
	f("- &x name\n- *x\n", "keys[0]: want a mapping")
	f("- name: a\n  hash: "+h+"\n---\n- name: b\n", "want one YAML document")
	f("[{\"name\": \"a\", \"hash\": 3}]", "keys[0].hash: want a string")
	f("- {", "keys.yaml: ")
	// Errors are bounded.
	_, err := Parse("k", []byte(strings.Repeat("- name: 'bad name'\n", 50)))
	if err == nil || !strings.Contains(err.Error(), "and 80 more errors") {
		t.Errorf("50 bad keys: %v", err)
	}
	if _, err := Parse("k", make([]byte, MaxFileBytes+1)); err == nil || !strings.Contains(err.Error(), "over the bound") {
		t.Errorf("a file over MaxFileBytes: %v", err)
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "A9", "team-a", "a.b_c-d", strings.Repeat("x", MaxNameLen)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".a", "_a", "a b", "a\"b", "é", "a{b}", strings.Repeat("x", MaxNameLen+1)} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
}

// FuzzParse: any bytes parse to keys or an error, never a panic; what
// parses is valid (names, limits, weights within bounds, unique).
func FuzzParse(f *testing.F) {
	h := hashOf("sk-a")
	for _, s := range []string{
		"",
		"- name: a\n  hash: " + h + "\n  models: [m]\n  rpm: 3\n  tpm: 100\n  weight: 2\n",
		`[{"name":"a","hash":"` + h + `","rpm":1}]`,
		"- name: a\n  hash: " + h + "\n- name: a\n  hash: " + h + "\n",
		"- &a {name: x}\n- *a\n",
		"- name: a\n  hash: sha256:zz\n  rpm: 1e99\n",
		"{a: [b, {c: d}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := Parse("fuzz", data)
		if err != nil {
			return
		}
		names := map[string]bool{}
		hashes := map[[32]byte]bool{}
		for _, s := range specs {
			if CheckName(s.Name) != nil || names[s.Name] || hashes[s.Hash] {
				t.Fatalf("invalid or repeated key accepted: %+v", s)
			}
			names[s.Name], hashes[s.Hash] = true, true
			if s.RPM < 0 || s.RPM > MaxRPM || s.TPM < 0 || s.TPM > MaxTPM || !(s.Weight >= MinWeight && s.Weight <= MaxWeight) || len(s.Models) > MaxModels {
				t.Fatalf("out of bounds: %+v", s)
			}
		}
	})
}
