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
