package workload

import (
	"sync"
	"testing"

	"github.com/saltus-lb/saltus/rules/leakcheck"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var llama3 = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	return tokenizer.Load("../../tokenpool/testdata/models/llama3/tokenizer.json.gz")
})

// tokens counts text's Llama-3 tokens (no BOS), as the engine counts a
// message's content.
func tokens(t testing.TB, text string) []int32 {
	t.Helper()
	tok, err := llama3()
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode(nil, text)
}

// mustNew is New that fails the test on an error.
func mustNew(t testing.TB, name string, opts Options) Workload {
	t.Helper()
	w, err := New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
