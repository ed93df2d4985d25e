//go:build !race

package openai

import "testing"

// TestDecodeScratchAllocs: a loop's decode of a chat through its warm
// Scratch allocates nothing (the model name is the last one's, the
// strings views into the body or the Scratch).
func TestDecodeScratchAllocs(t *testing.T) {
	for _, c := range decodeBodies() {
		body := []byte(c.body)
		var (
			d  Request
			sc Scratch
		)
		run := func() {
			if e := Decode(&d, KindChat, body, 64, &sc); e != nil {
				t.Fatal(e)
			}
		}
		run()
		if n := testing.AllocsPerRun(20, run); n != 0 {
			t.Errorf("%s: %v allocations per decode, want 0", c.name, n)
		}
	}
}
