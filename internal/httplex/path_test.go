package httplex

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizePath(t *testing.T) {
	t.Parallel()
	ok := func(in, want string) {
		t.Helper()
		got, err := NormalizePath(in)
		if err != nil || got != want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	ok("/", "/")
	ok("/v1/chat/completions", "/v1/chat/completions")
	ok("/.well-known/x", "/.well-known/x")
	ok("/v1/..x/y", "/v1/..x/y")
	ok("/v1/.../y", "/v1/.../y")
	ok("/a//b", "/a//b")
	ok("/a:b@c!$&'()*+,;=", "/a:b@c!$&'()*+,;=")
	// Unreserved escapes decoded, the rest in uppercase hex.
	ok("/v1/%63hat/%43ompletions", "/v1/chat/Completions")
	ok("/v1/chat%2Dx%5f%7e%2e", "/v1/chat-x_~.")
	ok("/a%3ab%3Fc%25", "/a%3Ab%3Fc%25")
	ok("/caf%c3%a9", "/caf%C3%A9")
	ok("/%2E%2Ex", "/..x")
	// Dot segments removed (RFC 3986 §5.2.4 and its examples).
	ok("/v1/./chat/completions", "/v1/chat/completions")
	ok("/v1/x/../chat/completions", "/v1/chat/completions")
	ok("/a/b/c/./../../g", "/a/g")
	ok("/mid/content=5/../6", "/mid/6")
	ok("/a/.", "/a/")
	ok("/a/b/..", "/a/")
	ok("/a/..", "/")
	ok("/.", "/")
	ok("/./", "/")
	ok("//..", "/")
	ok("/v1/../tokenize", "/tokenize")

	bad := func(in string, want error) {
		t.Helper()
		got, err := NormalizePath(in)
		if !errors.Is(err, want) {
			t.Errorf("NormalizePath(%q) = %q, %v; want error %v", in, got, err, want)
		}
	}
	// The attacks of issue 15, and their relatives.
	bad("/v1/%2e%2e/tokenize", ErrPathDotSegment)
	bad("/v1/%2E%2E/tokenize", ErrPathDotSegment)
	bad("/v1/.%2e/tokenize", ErrPathDotSegment)
	bad("/v1/%2e./tokenize", ErrPathDotSegment)
	bad("/v1/%2e/tokenize", ErrPathDotSegment)
	bad("/v1/..%2ftokenize", ErrPathSlash)
	bad("/v1/..%2Ftokenize", ErrPathSlash)
	bad("/v1/%2f..%2ftokenize", ErrPathSlash)
	bad("/v1/..%5ctokenize", ErrPathBackslash)
	bad("/v1/..\\tokenize", ErrPathBackslash)
	bad("/v1/%00", ErrPathControl)
	bad("/v1/%0a", ErrPathControl)
	bad("/v1/%7F", ErrPathControl)
	bad("/..", ErrPathAboveRoot)
	bad("/../v1/chat/completions", ErrPathAboveRoot)
	bad("/v1/../../tokenize", ErrPathAboveRoot)
	bad("/a/./../..", ErrPathAboveRoot)
	bad("/v1/%2", ErrPathEscape)
	bad("/v1/%", ErrPathEscape)
	bad("/v1/%zz", ErrPathEscape)
	bad("/v1/%2/x", ErrPathEscape)
	bad("/v1/%%41", ErrPathEscape)
	bad("/v1/\x00", ErrPathChar)
	bad("/v1/a b", ErrPathChar)
	bad("/v1/\x7f", ErrPathChar)
	bad("/v1/é", ErrPathChar)
	bad("/v1/<x>", ErrPathChar)
	bad("/v1/a|b", ErrPathChar)
	bad("/v1/a\"b", ErrPathChar)
	bad("", ErrPathNotAbsolute)
	bad("v1/chat", ErrPathNotAbsolute)
}

// checkNormal asserts NormalizePath's output properties: it starts with
// "/", has no dot segment, no encoded slash, no lowercase escape, and is
// its own normal form.
func checkNormal(t *testing.T, in, out string) {
	t.Helper()
	if !strings.HasPrefix(out, "/") {
		t.Fatalf("NormalizePath(%q) = %q: does not start with /", in, out)
	}
	for seg := range strings.SplitSeq(out[1:], "/") {
		if seg == "." || seg == ".." {
			t.Fatalf("NormalizePath(%q) = %q: dot segment", in, out)
		}
	}
	if u := strings.ToUpper(out); strings.Contains(u, "%2F") || strings.Contains(u, "%5C") || strings.Contains(u, "%2E") || strings.ContainsRune(out, '\\') {
		t.Fatalf("NormalizePath(%q) = %q: encoded slash, backslash or dot", in, out)
	}
	for i := 0; i < len(out); i++ {
		if out[i] == '%' && (i+2 >= len(out) || strings.ToUpper(out[i+1:i+3]) != out[i+1:i+3]) {
			t.Fatalf("NormalizePath(%q) = %q: escape not in uppercase hex", in, out)
		}
	}
	again, err := NormalizePath(out)
	if err != nil || again != out {
		t.Fatalf("NormalizePath(%q) = %q, but NormalizePath(%q) = %q, %v", in, out, out, again, err)
	}
}

func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/v1/chat/completions", "/v1/../tokenize", "/v1/%2e%2e/tokenize",
		"/v1/..%2ftokenize", "/a/b/c/./../../g", "/%41%3a%c3%a9", "//..", "/a/.", "/v1/%2", "/..x/."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		out, err := NormalizePath(p)
		if err != nil {
			if out != "" {
				t.Fatalf("NormalizePath(%q) = %q with error %v", p, out, err)
			}
			return
		}
		checkNormal(t, p, out)
	})
}

func TestValidHost(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"": true, "localhost": true, "127.0.0.1:8080": true, "api.example.com": true, "a-b_c~d.e": true,
		"[::1]": true, "[::1]:80": true, "[fe80::1%25eth0]": false, "[v1.x]": true, "host:": true, "x%41y": true,
		"a b": false, "a/b": false, "a@b": false, "host:80:80": false, "host:8x": false, "host:123456": false,
		"[::1": false, "[]": false, "[::1]x": false, "a\x00": false, "a\tb": false, "é": false, "%4": false, "a,b": true,
	} {
		if got := ValidHost(s); got != want {
			t.Errorf("ValidHost(%q) = %v, want %v", s, got, want)
		}
	}
}
