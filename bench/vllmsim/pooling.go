package vllmsim

import (
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/saltus-lb/saltus/tokenpool/chat"
)

// vLLM's pooling and scoring APIs, as far as a router needs them
// answered: each input (or query and document pair) is a sequence the
// engine prefills (one step of output, the pooler's), through the same
// scheduler and prefix cache as a generation, so a router's placement
// shows in their latency and in the cache counters. The vectors and
// scores are made up, equal for equal inputs.

// Bounds of one pooling request: the inputs of a batch, the documents
// of a score or rerank request (vLLM has none; the simulator answers
// more with a 400).
const (
	maxPoolingInputs = 256
	embedDims        = 8
)

// poolKind is the pooling endpoint a request came to.
type poolKind uint8

const (
	poolEmbed    poolKind = iota + 1 // /v1/embeddings
	poolPooling                      // /pooling
	poolClassify                     // /classify
	poolScore                        // /score, /v1/score
	poolRerank                       // /rerank, /v1/rerank, /v2/rerank
)

// poolKindOf is the kind of a pooling endpoint's path.
func poolKindOf(path string) poolKind {
	switch path {
	case "/v1/embeddings":
		return poolEmbed
	case "/pooling":
		return poolPooling
	case "/classify":
		return poolClassify
	case "/score", "/v1/score":
		return poolScore
	}
	return poolRerank
}

// pooling serves the pooling and scoring endpoints.
func (s *Sim) pooling(ctx *fasthttp.RequestCtx, pk poolKind) {
	if _, done := s.inject(ctx); done {
		return
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, model, e := parseObject(p, ctx.PostBody())
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	m, e := s.served.resolve(model)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	reqs, e := poolingInputs(v, pk)
	if e != nil {
		s.answerError(ctx, e)
		return
	}
	seqs := make([]*seq, len(reqs))
	hashes := make([]uint64, len(reqs))
	prompt := 0
	for i := range reqs {
		t, e := s.p.encode(&reqs[i], m, s.cfg.KVEvents.Enable)
		if e == nil && t.n == 0 {
			e = badRequest("input", "input[%d]: no tokens", i)
		}
		if e == nil && t.n >= s.cfg.maxModelLen() {
			e = badRequest("input", "This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.", s.cfg.maxModelLen(), t.n)
		}
		if e != nil {
			cancelAll(seqs)
			s.answerError(ctx, e)
			return
		}
		if seqs[i] = s.start(ctx, false, m, t, 1, 0); seqs[i] == nil {
			cancelAll(seqs)
			return // start answered
		}
		hashes[i], prompt = t.hash, prompt+t.n
	}
	for _, sq := range seqs {
		if !s.awaitDone(ctx, sq) {
			return
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendPooling(make([]byte, 0, 256+64*len(seqs)), pk, m.quoted, hashes, prompt, s.ids.Add(1)))
}

// cancelAll tells the scheduler to drop the sequences started.
func cancelAll(seqs []*seq) {
	for _, sq := range seqs {
		if sq != nil {
			sq.cancelled.Store(true)
		}
	}
}

// poolingInputs reads a pooling request's sequences: the inputs of an
// embeddings, pooling or classify request ("input": a string, strings,
// token ids or arrays of them), or a score or rerank request's query
// with each document ("query" and "documents"; "text_1" and "text_2"),
// as one text each.
func poolingInputs(v *fastjson.Value, pk poolKind) (reqs []request, e *apiError) {
	one := func(x *fastjson.Value, name string) (request, *apiError) {
		r := request{kind: kindCompletion, addSpecial: true}
		switch x.Type() {
		case fastjson.TypeString:
			r.text = string(x.GetStringBytes())
			return r, nil
		case fastjson.TypeArray:
			return r, tokenIDs(&r, x, name)
		}
		return r, badRequest(name, "%s: want a string or an array of token ids, got %s", name, x.Type())
	}
	if pk == poolScore || pk == poolRerank {
		qn, dn := "text_1", "text_2"
		if pk == poolRerank {
			qn, dn = "query", "documents"
		}
		q, d := chat.Field(v, qn), chat.Field(v, dn)
		if q != nil && q.Type() == fastjson.TypeArray && len(q.GetArray()) == 1 {
			q = q.GetArray()[0]
		}
		if q == nil || q.Type() != fastjson.TypeString {
			return nil, badRequest(qn, "%s: want a string", qn)
		}
		var list []*fastjson.Value
		switch {
		case d != nil && d.Type() == fastjson.TypeString:
			list = []*fastjson.Value{d}
		case d != nil && d.Type() == fastjson.TypeArray:
			list = d.GetArray()
		}
		if len(list) == 0 || len(list) > maxPoolingInputs {
			return nil, badRequest(dn, "%s: want 1 to %d strings", dn, maxPoolingInputs)
		}
		for i, x := range list {
			if x.Type() != fastjson.TypeString {
				return nil, badRequest(dn, "%s[%d]: want a string, got %s", dn, i, x.Type())
			}
			// The pair as one sequence, the query first: the prefix every
			// pair of a query shares.
			reqs = append(reqs, request{kind: kindCompletion, addSpecial: true, text: string(q.GetStringBytes()) + "\n" + string(x.GetStringBytes())})
		}
		return reqs, nil
	}
	in := chat.Field(v, "input")
	if in == nil || in.Type() == fastjson.TypeNull {
		return nil, badRequest("input", "input: missing")
	}
	arr := in.GetArray()
	if in.Type() == fastjson.TypeString || (len(arr) > 0 && arr[0].Type() == fastjson.TypeNumber) {
		r, e := one(in, "input")
		return []request{r}, e
	}
	if len(arr) == 0 || len(arr) > maxPoolingInputs {
		return nil, badRequest("input", "input: want a string, token ids, or 1 to %d of either", maxPoolingInputs)
	}
	for i, x := range arr {
		r, e := one(x, "input["+strconv.Itoa(i)+"]")
		if e != nil {
			return nil, e
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}

// appendPooling appends the answer: vLLM's shapes, with values drawn
// from each sequence's hash.
func appendPooling(b []byte, pk poolKind, model []byte, hashes []uint64, prompt int, n uint64) []byte {
	b = append(b, `{"id":"`...)
	switch pk {
	case poolEmbed:
		b = append(b, "embd-"...)
	case poolPooling:
		b = append(b, "pool-"...)
	case poolClassify:
		b = append(b, "classify-"...)
	case poolScore:
		b = append(b, "score-"...)
	default:
		b = append(b, "rerank-"...)
	}
	b = strconv.AppendUint(b, n, 16)
	b = append(b, `","object":"list","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"model":`...)
	b = append(b, model...)
	if pk == poolRerank {
		b = append(b, `,"results":[`...)
	} else {
		b = append(b, `,"data":[`...)
	}
	for i, h := range hashes {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		switch pk {
		case poolEmbed, poolPooling:
			if pk == poolEmbed {
				b = append(b, `,"object":"embedding","embedding":[`...)
			} else {
				b = append(b, `,"object":"pooling","data":[`...)
			}
			for d := range embedDims {
				if d > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendFloat(b, unit(h, d)*2-1, 'f', 6, 64)
			}
			b = append(b, ']')
		case poolClassify:
			p := unit(h, 0)
			label := "positive"
			if p < 0.5 {
				label = "negative"
			}
			b = append(b, `,"label":"`...)
			b = append(b, label...)
			b = append(b, `","probs":[`...)
			b = strconv.AppendFloat(b, 1-p, 'f', 6, 64)
			b = append(b, ',')
			b = strconv.AppendFloat(b, p, 'f', 6, 64)
			b = append(b, `],"num_classes":2`...)
		case poolScore:
			b = append(b, `,"object":"score","score":`...)
			b = strconv.AppendFloat(b, unit(h, 0), 'f', 6, 64)
		case poolRerank:
			b = append(b, `,"relevance_score":`...)
			b = strconv.AppendFloat(b, unit(h, 0), 'f', 6, 64)
		}
		b = append(b, '}')
	}
	b = append(b, `],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	if pk != poolRerank {
		b = append(b, `,"completion_tokens":0`...)
	}
	return append(b, `}}`...)
}

// unit is a value in [0, 1) drawn from h for dimension d.
func unit(h uint64, d int) float64 {
	x := h + uint64(d+1)*0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return math.Float64frombits(0x3ff<<52|x>>12) - 1
}
