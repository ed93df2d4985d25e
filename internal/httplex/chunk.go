package httplex

// ParseChunkSize parses a chunk size line of a chunked body (RFC 9112
// §7.1) without its line end (LF, and the CR before it): 1 to 15 hex
// digits (no overflow of int64), then optional spaces or tabs, then
// optionally ';' and chunk extensions, which are ignored. Both HTTP
// parsers use it: the reactor's for request bodies and the backend's for
// response bodies.
func ParseChunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto rest
		}
		if i >= 15 { // 15 hex digits: no overflow of int64
			return 0, false
		}
		n = n<<4 | int64(d)
	}
rest:
	if i == 0 {
		return 0, false
	}
	for ; i < len(line); i++ {
		switch line[i] {
		case ' ', '\t':
			continue
		case ';':
			return n, true
		}
		return 0, false
	}
	return n, true
}
