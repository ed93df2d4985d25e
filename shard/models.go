package shard

import (
	"context"
	"fmt"

	"github.com/saltus-lb/saltus/openai"
	"github.com/saltus-lb/saltus/reactor"
)

// GET /v1/models/{id} (the SDKs' models.retrieve): the model object of
// that id from the backends' /v1/models union, as the OpenAI API answers
// it; 404 when no routable backend serves it, 503 when no backend is
// routable. vLLM itself serves no such path (its router has only the
// list), so the answer follows OpenAI's: the object as listed, and the
// not-found error with param "model" and code "model_not_found" (the
// message in vLLM's words for an unknown model).

// retrieveModel answers GET /v1/models/{id}. On a models worker.
func (r *Router) retrieveModel(ctx context.Context, x exchange, id string) {
	routable := false
	for _, b := range r.up.Snapshot() {
		if _, ok := r.state(b); ok {
			routable = true
			break
		}
	}
	if !routable {
		r.fail(x, routeModels, &openai.Error{Status: 503, Type: "server_error", Code: "no_backend",
			Message: "no backend is available to serve the request"})
		return
	}
	c, cancel := context.WithTimeout(ctx, modelsTimeout)
	body, err := r.up.Models(c)
	cancel()
	if err != nil {
		r.fail(x, routeModels, &openai.Error{Status: 502, Type: "server_error", Code: "bad_gateway",
			Message: fmt.Sprintf("cannot list the backends' models: %v", err)})
		return
	}
	if m := openai.FindModel(body, id); m != nil {
		r.m.request(routeModels, 200) // counted first, as fail does
		hdr := []reactor.Header{{Name: "Content-Type", Value: "application/json"}}
		x.Respond(200, hdr, m)
		r.logOwn(x, 200, hdr, m)
		return
	}
	r.fail(x, routeModels, &openai.Error{Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("The model `%.200s` does not exist.", id)})
}
