package openai

import "testing"

// TestPyJSON: tool inputs as Python's json.dumps writes them (the wants
// are Python 3's output).
func TestPyJSON(t *testing.T) {
	t.Parallel()
	f := func(in, want string) {
		t.Helper()
		if got := string(appendPyJSON(nil, []byte(in), 0)); got != want {
			t.Fatalf("%s: got %s, want %s", in, got, want)
		}
	}
	f(`{"a":[1,"é😀\u0001\""],"b":-0}`, `{"a": [1, "\u00e9\ud83d\ude00\u0001\""], "b": 0}`)
	f(`{ "x" : { } , "y" : [ ] , "z":[true,false,null] } `, `{"x": {}, "y": [], "z": [true, false, null]}`)
	f(`[1.0,1e3,0.0001,1e-5,1e16,1.5e16,123.456,-0.0,1e22,5e-324,1.7976931348623157e308,0.1,100.0,12345678901234567.0,1E400]`,
		`[1.0, 1000.0, 0.0001, 1e-05, 1e+16, 1.5e+16, 123.456, -0.0, 1e+22, 5e-324, 1.7976931348623157e+308, 0.1, 100.0, 1.2345678901234568e+16, Infinity]`)
	f(`"tab\there\/"`, `"tab\there/"`)
	f(`123456789012345678901234567890`, `123456789012345678901234567890`)
}
