package openai

import (
	"fmt"
	"strings"
	"testing"
)

// decodeBodies are the chats BenchmarkDecode and TestDecodeScratchAllocs
// decode: scanBodies' 4 KB chat (a system prompt and a question), a 4 KB
// chat of short turns with content parts and an escape (the dearest
// shape per byte short of tiny values, as shard's BenchmarkDecodeOnLoop),
// and scanBodies' 10 k short messages.
func decodeBodies() []struct{ name, body string } {
	var turns strings.Builder
	for i := 0; turns.Len() < 4<<10-200; i++ {
		if i > 0 {
			turns.WriteByte(',')
		}
		if i%5 == 4 {
			fmt.Fprintf(&turns, `{"role":"user","content":[{"type":"text","text":"part \"%d\""},{"type":"image_url","image_url":{"url":"u"}}]}`, i)
			continue
		}
		fmt.Fprintf(&turns, `{"role":"user","content":"message number %d"}`, i)
	}
	bodies := scanBodies()
	return []struct{ name, body string }{
		bodies[0],
		{"turns4K", `{"model":"meta-llama/Meta-Llama-3-8B-Instruct","stream":true,"messages":[` + turns.String() + `]}`},
		bodies[3],
	}
}

// BenchmarkDecode decodes a chat as a loop does (through its warm
// Scratch), as a decode worker does (copying), and as the fastjson
// decoder did (copying, with a pooled parser).
func BenchmarkDecode(b *testing.B) {
	for _, c := range decodeBodies() {
		body := []byte(c.body)
		for _, how := range []string{"scratch", "copying", "fastjson"} {
			b.Run(c.name+"/"+how, func(b *testing.B) {
				var (
					d  Request
					sc Scratch
				)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					var e *Error
					switch how {
					case "scratch":
						e = Decode(&d, KindChat, body, 64, &sc)
					case "copying":
						e = Decode(&d, KindChat, body, 64, nil)
					default:
						e = oldDecode(&d, KindChat, body)
					}
					if e != nil {
						b.Fatal(e)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeMessages decodes Anthropic Messages bodies through a
// warm Scratch (the loop's way) and copying: a 4 KB system prompt and a
// question, its chat twin for comparison, and a 4 KB tool round (tools,
// tool_use and tool_result blocks).
func BenchmarkDecodeMessages(b *testing.B) {
	system := strings.Repeat("You are a meticulous assistant for a shipping company. Answer with tide tables. ", 50)
	var tools strings.Builder
	for i := 0; tools.Len() < 3<<10; i++ {
		fmt.Fprintf(&tools, `{"role":"assistant","content":[{"type":"text","text":"Looking up %d."},{"type":"tool_use","id":"toolu_%d","name":"get_tide","input":{"port":"Rotterdam","day":%d}}]},`+
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":"High water 06:12."}]},`, i, i, i, i)
	}
	cases := []struct {
		name string
		kind Kind
		body string
	}{
		{"system4K", KindMessages, `{"model":"m","max_tokens":64,"stream":true,"system":"` + system + `","messages":[{"role":"user","content":"Where is the Maersk Alabama?"}]}`},
		{"system4K-chat", KindChat, `{"model":"m","max_tokens":64,"stream":true,"messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"Where is the Maersk Alabama?"}]}`},
		{"tools4K", KindMessages, `{"model":"m","max_tokens":64,"tools":[{"name":"get_tide","description":"Tides","input_schema":{"type":"object","properties":{"port":{"type":"string"}}}}],` +
			`"messages":[{"role":"user","content":"Tides?"},` + strings.TrimSuffix(tools.String(), ",") + `]}`},
	}
	for _, c := range cases {
		body := []byte(c.body)
		for _, how := range []string{"scratch", "copying"} {
			b.Run(c.name+"/"+how, func(b *testing.B) {
				var (
					d  Request
					sc Scratch
				)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					s := &sc
					if how == "copying" {
						s = nil
					}
					if e := Decode(&d, c.kind, body, 64, s); e != nil {
						b.Fatal(e)
					}
				}
			})
		}
	}
}
