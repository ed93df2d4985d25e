package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/saltus-lb/saltus/bench/vllmsim"
	"github.com/saltus-lb/saltus/bench/workload"
)

// Layout is which models each engine of a local fleet serves: issue 29's
// model pools. saltus is given the engines' URLs only and learns the
// models from their GET /v1/models. Immutable.
type Layout struct {
	// Name is the layout's name for `saltus bench --fleet`.
	Name string
	// Engines[i] is what engine i serves; the fleet has that many.
	Engines []Served
	// Of names the layout this one is a pool of ("" if none): its
	// engines, alone, for the mixed workload's users of its models
	// (PoolTable compares the two).
	Of string
}

// Served is the models one engine serves.
type Served struct {
	// Models are base models: the first is the engine's primary
	// (vllmsim.Config.Model), the rest ExtraModels.
	Models []string
	// Adapters are LoRA adapters loaded at start (LoRAModules).
	Adapters []vllmsim.LoRA
}

// apply makes cfg serve s (and nothing else).
func (s Served) apply(cfg *vllmsim.Config) {
	cfg.Model, cfg.ExtraModels, cfg.LoRAModules = s.Models[0], s.Models[1:], s.Adapters
}

// servedNames lists the names cfg serves: base models, then adapters
// (those loaded at start).
func servedNames(cfg *vllmsim.Config) []string {
	names := append([]string{cfg.Model}, cfg.ExtraModels...)
	for _, l := range cfg.LoRAModules {
		names = append(names, l.Name)
	}
	return names
}

// Models lists every name some engine of l serves, in order of first
// appearance.
func (l *Layout) Models() []string {
	var out []string
	add := func(n string) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	for _, e := range l.Engines {
		for _, m := range e.Models {
			add(m)
		}
		for _, a := range e.Adapters {
			add(a.Name)
		}
	}
	return out
}

// Describe is one line for reports: each run of engines serving the
// same, e.g. "e0-e1 org/alpha + adapter alpha-tuned; e2 org/alpha".
func (l *Layout) Describe() string {
	var parts []string
	for i := 0; i < len(l.Engines); {
		j := i
		for j+1 < len(l.Engines) && slices.Equal(l.Engines[j+1].Models, l.Engines[i].Models) &&
			slices.Equal(l.Engines[j+1].Adapters, l.Engines[i].Adapters) {
			j++
		}
		p := fmt.Sprintf("e%d", i)
		if j > i {
			p = fmt.Sprintf("e%d-e%d", i, j)
		}
		p += " " + strings.Join(l.Engines[i].Models, ", ")
		for _, a := range l.Engines[i].Adapters {
			p += " + adapter " + a.Name
		}
		parts = append(parts, p)
		i = j + 1
	}
	d := l.Name + ": " + strings.Join(parts, "; ")
	if l.Of != "" {
		d += " (" + l.Of + "'s engines alone, with its users of these models only)"
	}
	return d
}

// The mixed fleet of issue 29's "Done when": five engines, three serving
// org/alpha (two of them also its adapter alpha-tuned) and two org/beta.
var (
	alphaTuned = vllmsim.LoRA{Name: workload.ModelAlphaTuned, Path: "/adapters/alpha-tuned", Base: workload.ModelAlpha}
	mixedFleet = []Served{
		{Models: []string{workload.ModelAlpha}, Adapters: []vllmsim.LoRA{alphaTuned}},
		{Models: []string{workload.ModelAlpha}, Adapters: []vllmsim.LoRA{alphaTuned}},
		{Models: []string{workload.ModelAlpha}},
		{Models: []string{workload.ModelBeta}},
		{Models: []string{workload.ModelBeta}},
	}
)

// layouts are the layouts besides "single" (every engine serves the
// simulator's configured models: LocalFleet.Layout nil). "alpha" and
// "beta" are the mixed fleet's pools alone: the per-pool baseline of
// "hit ratio inside the pools no lower than one model alone gets" (the
// same engines and the same users, without the other pool beside them).
var layouts = []*Layout{
	{Name: "mixed", Engines: mixedFleet},
	{Name: "alpha", Engines: mixedFleet[:3], Of: "mixed"},
	{Name: "beta", Engines: mixedFleet[3:], Of: "mixed"},
}

// SingleLayout is the name of the default layout: every engine serves
// the simulator's configured models.
const SingleLayout = "single"

// LayoutNames lists the layout names LookupLayout takes, "single" first.
func LayoutNames() []string {
	names := []string{SingleLayout}
	for _, l := range layouts {
		names = append(names, l.Name)
	}
	return names
}

// LookupLayout returns the layout called name; nil for "single".
func LookupLayout(name string) (*Layout, error) {
	if name == SingleLayout {
		return nil, nil
	}
	for _, l := range layouts {
		if l.Name == name {
			return l, nil
		}
	}
	return nil, fmt.Errorf("unknown fleet %q, want one of %s", name, strings.Join(LayoutNames(), ", "))
}
