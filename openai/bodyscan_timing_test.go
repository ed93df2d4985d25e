package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// systemA and chatBody build the 4 KB chat of scanBodies: a system
// prompt and a user message, streamed, as shard's tests build theirs.
const systemA = "You are a meticulous assistant for the lighthouse keepers' guild. Answer every question about tides, " +
	"lamps, fog signals and the maintenance of Fresnel lenses with care, cite the guild's handbook where you can, " +
	"and never invent a regulation. Keep answers short unless asked for detail."

func chatBody(msgs ...string) string {
	type m struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []m
	for i := 0; i < len(msgs); i += 2 {
		ms = append(ms, m{msgs[i], msgs[i+1]})
	}
	b, err := json.Marshal(map[string]any{"model": "meta-llama/Meta-Llama-3-8B-Instruct", "messages": ms, "stream": true})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// scanBodies are the shapes BenchmarkScanJSON and the zero-allocation
// test scan: a 4 KB chat (mostly two long strings), 1 MB of tiny values
// (the shape of the 3 GB body), 1 M token ids, 10 k short messages, and a
// 1 MB prompt with an escape every 12 bytes.
func scanBodies() []struct{ name, body string } {
	system := strings.Repeat(systemA+" ", 3000/len(systemA)+1)[:3000]
	ids := strings.Repeat("12345,", 1_000_000)
	var msgs strings.Builder
	for i := range 10_000 {
		if i > 0 {
			msgs.WriteByte(',')
		}
		fmt.Fprintf(&msgs, `{"role":"user","content":"message %d with \"quotes\""}`, i)
	}
	return []struct{ name, body string }{
		{"chat4K", chatBody("system", system, "user", strings.Repeat("Describe the lamp. ", 52))},
		{"tinyValues1M", `{"model":"m","junk":[` + strings.Repeat("1,", 512<<10) + `1]}`},
		{"tokenIDs1M", `{"model":"m","prompt_token_ids":[` + ids[:len(ids)-1] + `]}`},
		{"messages10k", `{"model":"m","messages":[` + msgs.String() + `]}`},
		{"escapes1M", `{"model":"m","prompt":"` + strings.Repeat(`a line of the prompt, \"quoted\",\n`, 1<<20/36) + `"}`},
	}
}

// BenchmarkScanJSON is the structural check every chat and completion
// body passes before it is parsed (BodyLimits.Check), in MB/s.
func BenchmarkScanJSON(b *testing.B) {
	l := DefaultBodyLimits()
	for _, c := range scanBodies() {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, e := scanJSON(body, l.MaxValues, l.MaxDepth); e.kind != ScanOK {
					b.Fatal(e)
				}
			}
		})
	}
}
