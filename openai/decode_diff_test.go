package openai

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// sameDecode decodes body as each Kind with Decode (copying, and through
// sc as a loop does) and with the fastjson decoder it replaced
// (olddecode_test.go): the same Request, or the same error. A body the
// body scan refuses (not JSON by its grammar, or deeper than
// MaxScanDepth) gets the scan's answer from Decode, whatever fastjson
// made of it: fastjson let `01`, `1.`, `\x` and `nan` pass, which the
// checked path (BodyLimits.Check) refused before Decode ran anyway.
func sameDecode(t *testing.T, sc *Scratch, body []byte) {
	t.Helper()
	_, ce, _ := BodyLimits{MaxValues: math.MaxInt, MaxDepth: MaxScanDepth}.Check(body)
	for _, k := range []Kind{KindChat, KindCompletion, KindResponses} {
		var got, view, want Request
		ge := Decode(&got, k, body, MaxScanDepth, nil)
		ve := Decode(&view, k, body, MaxScanDepth, sc)
		if !sameError(ge, ve) || ge == nil && !reflect.DeepEqual(got, view) {
			t.Fatalf("kind %d %q: copying %+v %+v, through a Scratch %+v %+v", k, body, got, ge, view, ve)
		}
		if ce != nil {
			if !sameError(ge, ce) {
				t.Fatalf("kind %d %q: %+v, want the body scan's %+v", k, body, ge, ce)
			}
			continue
		}
		we := oldDecode(&want, k, body)
		if we != nil && len(we.Message) >= 12 && we.Message[:12] == "invalid JSON" {
			// fastjson refused a body the scan accepts: none known.
			t.Fatalf("kind %d %q: fastjson refused it (%v), the scan accepted it, Decode gave %+v", k, body, we, ge)
		}
		if !sameError(ge, we) {
			t.Fatalf("kind %d %q: error %+v, fastjson's decoder %+v", k, body, ge, we)
		}
		if ge == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("kind %d %q:\n got %+v\nwant %+v", k, body, got, want)
		}
	}
}

func sameError(a, b *Error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// decodeSeeds are request bodies from the repository's tests: the
// backquoted JSON objects in openai's and chat's test files, and the chat
// corpus's conversations as requests.
func decodeSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	re := regexp.MustCompile("`(\\{[^`]*)`")
	for _, glob := range []string{"*_test.go", "../tokenpool/chat/*_test.go", "../shard/*_test.go"} {
		files, _ := filepath.Glob(glob) // a constant pattern: no error
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(src, -1) {
				seeds = append(seeds, m[1])
			}
		}
	}
	zr, err := os.Open("../tokenpool/testdata/corpus/chat.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	gz, err := gzip.NewReader(zr)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	var cases []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		c["model"] = json.RawMessage(`"m"`)
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
		// The same conversation as a Responses input.
		seeds = append(seeds, bytes.Replace(b, []byte(`"messages":`), []byte(`"input":`), 1))
	}
	// Corners the seeds may miss: escaped keys and types, surrogates,
	// numbers at the edges of the integer readers, repeated members whose
	// first occurrence is bad, nulls.
	for _, s := range []string{
		`{"mod\u0065l":"m","m\u0065ssages":[{"r\u006fle":"assist\u0061nt","reasoning":"r","content":"c"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"typ\u0065":"t\u0065xt","text":"\ud800\u0041 \ud83d\ude00 \ud800x \udc00\ud800 \u00e9\/\b"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":null,"input_audio":null,"video_url":1},{"type":"","text":"x"},{"type":"prompt_embeds"},{"type":"` + strings.Repeat("x", 40) + `"}]}]}`,
		`{"model":"m","prompt_token_ids":[-0,0,2147483647]}`, `{"model":"m","prompt_token_ids":[2147483648]}`,
		`{"model":"m","prompt_token_ids":[1e2]}`, `{"model":"m","prompt_token_ids":[-1]}`, `{"model":"m","prompt_token_ids":[99999999999999999999]}`,
		`{"model":"m","prompt":"p","priority":-9223372036854775808}`, `{"model":"m","prompt":"p","priority":9223372036854775808}`,
		`{"model":"m","prompt":"p","priority":1.0}`, `{"model":"m","prompt":"p","priority":"1"}`, `{"model":"m","prompt":[[1],[2,3]],"priority":null}`,
		`{"model":"m","messages":5,"messages":[{"role":"user"}],"add_generation_prompt":1,"add_generation_prompt":null}`,
		`{"model":"m","messages":[{"role":"user"}],"chat_template_kwargs":{"enable_thinking":false,"enable_thinking":true}}`,
		`{"model":"m","messages":[{"role":"user"}],"chat_template_kwargs":{"enable_thinking":true,"enable_thinking":false},"stream_options":{"include_usage":null}}`,
		`{"model":"m","input":[{"type":"reasoning","content":[],"summary":[{"text":"s"}]},{"type":"function_call"},{"role":"assistant","content":[{"text":"a"}]},{"type":"reasoning","encrypted_content":""},{"type":"function_call_output","output":[{"type":"input_image"},{"type":"refusal","refusal":"no"}]},{"role":"user","content":null},{"role":"assistant"}],"instructions":"sys"}`,
		`{"model":"m","input":[{"type":"message","role":"tool","content":"t"},{"type":"x","role":"user"},{"type":"reasoning","encrypted_content":"e"}]}`,
		`{"model":"m","input":"x","instructions":"","previous_response_id":"resp_\u0031"}`,
		` {"model":"m","prompt":"p"} `, "{\"model\":\"m\",\"prompt\":\"a\tb\u0000\"}", `{"model":"\u0000"}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// TestDecodeMatchesFastjson runs sameDecode over the seeds, and over
// each seed cut short and with a byte changed, so that the errors are
// compared too.
func TestDecodeMatchesFastjson(t *testing.T) {
	t.Parallel()
	seeds := decodeSeeds(t)
	if len(seeds) < 200 {
		t.Fatalf("%d seeds: the test files moved?", len(seeds))
	}
	var sc Scratch
	// Every 7th byte mutated; under the race detector, which makes each
	// decode several times slower, every 23rd (still every seed, cut
	// and byte class), to keep CI's race run short.
	stride := 7
	if raceBuild {
		stride = 23
	}
	for _, s := range seeds {
		sameDecode(t, &sc, s)
		for _, cut := range []int{len(s) / 3, len(s) / 2, len(s) - 1} {
			sameDecode(t, &sc, s[:cut])
		}
		for i := 0; i < len(s); i += stride {
			for _, c := range []byte{'0', '"', 'n', '[', '{', '}', ',', '\\'} {
				m := bytes.Clone(s)
				m[i] = c
				sameDecode(t, &sc, m)
			}
		}
	}
}

// FuzzDecodeMatchesFastjson: for any bytes, each Kind, copying or through
// a Scratch (reused from a first body, as a loop reuses it), Decode gives
// the fastjson decoder's Request or error (sameDecode).
func FuzzDecodeMatchesFastjson(f *testing.F) {
	for _, s := range decodeSeeds(f) {
		f.Add(s, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var sc Scratch
		sameDecode(t, &sc, a)
		sameDecode(t, &sc, b)
	})
}
