package tokenpool_test

import (
	"context"
	"fmt"

	"github.com/saltus-lb/saltus/tokenpool"
	"github.com/saltus-lb/saltus/tokenpool/tokenizer"
	"github.com/saltus-lb/saltus/tree"
)

// The serving path's use of a shard (stage 4 then stage 5): keys come from
// token ids, or from the rendered text when the request bailed out.
func ExampleShard_Tokenize() {
	tok, err := tokenizer.Load("testdata/models/llama3/tokenizer.json.gz")
	if err != nil {
		panic(err)
	}
	// One shard; its "event loop" is this goroutine, running what the
	// pool posts from a queue (gnet's EventLoop.Execute in the server).
	queue := make(chan func(), 16)
	post := func(f func()) { queue <- f } // never blocks: MaxInFlight < 16 here
	cfg := tokenpool.DefaultConfig()
	cfg.MaxInFlight = 8
	pool, err := tokenpool.New(cfg, tok, []func(func()){post}, nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close(context.Background()) // nothing in flight at return
	shard := pool.Shard(0)

	model := "meta-llama/Meta-Llama-3-8B-Instruct"
	keys := func(r tokenpool.Result, segs []string) []uint64 {
		if r.Reason != tokenpool.ReasonNone {
			return tree.ByteBlockKeys(nil, tree.ByteBlockSeed(model), segs...)
		}
		return tree.BlockKeys(nil, tree.ModelSeed(model), r.IDs, tree.DefaultBlockSize)
	}
	segs := []string{"<|begin_of_text|>", "<|start_header_id|>", "user", "<|end_header_id|>\n\n",
		"Tell me a long story about a lighthouse keeper and the sea, with many details.", "<|eot_id|>"}
	var res tokenpool.Result
	for range 2 {
		if shard.Tokenize(&res, segs, func(r tokenpool.Result) {
			// On the loop, later. A request whose client left would
			// ignore r here.
			fmt.Println(r.Path, len(r.IDs), "ids", len(keys(r, segs)), "keys")
		}) {
			fmt.Println(res.Path, len(res.IDs), "ids", len(keys(res, segs)), "keys")
			continue
		}
		(<-queue)() // the loop runs the completion
	}
	// Output:
	// own 24 ids 1 keys
	// cache 24 ids 1 keys
}
