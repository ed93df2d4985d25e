package httplex

import (
	"bytes"
	"testing"
)

func TestParseChunkSize(t *testing.T) {
	t.Parallel()
	f := func(line string, want int64, wantOK bool) {
		t.Helper()
		n, ok := ParseChunkSize([]byte(line))
		if n != want || ok != wantOK {
			t.Errorf("ParseChunkSize(%q) = %d, %v; want %d, %v", line, n, ok, want, wantOK)
		}
	}
	f("0", 0, true)
	f("5", 5, true)
	f("1a", 26, true)
	f("FF", 255, true)
	f("fffffffffffffff", 1<<60-1, true) // 15 digits
	f("6;x=y", 6, true)
	f("6 \t;x=y", 6, true)
	f("6 \t", 6, true)
	f("6;", 6, true)
	f("000000000000005", 5, true)
	f("", 0, false)
	f(";x", 0, false)
	f(" 5", 0, false)
	f("0x5", 0, false)
	f("5x", 0, false)
	f("5 x", 0, false)
	f("-1", 0, false)
	f("5\r", 0, false)               // the caller strips the line end
	f("0000000000000005", 0, false)  // 16 digits
	f("1000000000000000", 0, false)  // 16 digits: would be 2^60
	f("ffffffffffffffff0", 0, false) // over int64
	f("5\r;x", 0, false)             // a CR is not whitespace
	f("5;x\r\n", 5, true)            // anything after ';' is the extensions'
}

// chunkSizeOracle is the reactor's chunk size parser from before the two
// parsers were made one: cut at ';', trim spaces and tabs, 1 to 15 hex
// digits. FuzzParseChunkSize holds ParseChunkSize to it.
func chunkSizeOracle(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

func FuzzParseChunkSize(f *testing.F) {
	for _, s := range []string{"0", "5", "6;x=y", "6 \t;x", "fffffffffffffff", "1000000000000000", " 5", "5 x", "5\r", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		n, ok := ParseChunkSize(line)
		wn, wok := chunkSizeOracle(line)
		if n != wn || ok != wok {
			t.Fatalf("ParseChunkSize(%q) = %d, %v; the reactor's old parser: %d, %v", line, n, ok, wn, wok)
		}
	})
}
