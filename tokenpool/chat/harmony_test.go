package chat

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// harmonyDay is the date the harmony tests' clock reads: the one
// openai_harmony's own fixtures use.
func harmonyDay() time.Time { return time.Date(2025, 6, 28, 23, 30, 0, 0, time.UTC) }

func harmonyRenderer(t testing.TB, vocab Vocab) *Renderer {
	t.Helper()
	r, err := NewHarmony(vocab, harmonyDay)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// withExtra gives m the extras a decoder would keep (tool_calls,
// tool_call_id).
func withExtra(m Message, x Extra) Message {
	m.parts = string(appendExtra(nil, &x))
	return m
}

// harmonyFixtureTools are the tools of openai_harmony's
// test_render_functions_with_parameters fixture, as a request gives them.
const harmonyFixtureTools = `[{"type":"function","function":{"name":"get_location","description":"Gets the location of the user."}},` +
	`{"type":"function","function":{"name":"get_current_weather","description":"Gets the current weather in the provided location.","parameters":{"type":"object","properties":{"location":{"type":"string","description":"The city and state, e.g. San Francisco, CA"},"format":{"type":"string","enum":["celsius","fahrenheit"],"default":"celsius"}},"required":["location"]}}},` +
	`{"type":"function","function":{"name":"get_multiple_weathers","description":"Gets the current weather in the provided list of locations.","parameters":{"type":"object","properties":{"locations":{"type":"array","items":{"type":"string"},"description":"List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"},"format":{"type":"string","enum":["celsius","fahrenheit"],"default":"celsius"}},"required":["locations"]}}},` +
	`{"type":"function","function":{"name":"kitchensink","description":"A function with various complex schemas.","parameters":{"description":"params object","type":"object","properties":{"string":{"type":"string","title":"STRING","description":"A string","examples":["hello","world"]},"string_nullable":{"type":"string","nullable":true,"description":"A nullable string","default":"the default"},"string_enum":{"type":"string","enum":["a","b","c"]},"oneof_string_or_number":{"oneOf":[{"type":"string","default":"default_string_in_oneof"},{"type":"number","description":"numbers can happen too"}],"description":"a oneof","default":20}}}}}]`

// harmonySystem is the system message vLLM builds, with the given
// effort and the line a conversation with function tools adds.
func harmonySystem(effort string, functions bool) string {
	s := "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: " +
		effort + "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message."
	if functions {
		s += "\nCalls to these tools must go to the commentary channel: 'functions'."
	}
	return s + "<|end|>"
}

// The expected prompts are openai_harmony's fixtures (its test-data
// directory) where one exists, changed only where vLLM builds other
// messages than the fixture's test does: vLLM always sets the date (the
// fixtures without a "Current date" line leave it out), gives a tool
// call the content type "json" rather than "<|constrain|>json", and
// addresses a tool's answer to the assistant on the commentary channel.
func TestHarmonyRender(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "gptoss")
	r := harmonyRenderer(t, tok)
	f := func(name string, msgs []Message, opt Options, want string) {
		t.Helper()
		segs, err := r.Render(nil, msgs, opt)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := joinText(segs); got != want {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
		for _, s := range segs {
			if strings.HasPrefix(s.Text, "<|") && strings.HasSuffix(s.Text, "|>") && !s.Special() {
				t.Errorf("%s: %q is text, want the special token", name, s.Text)
			}
		}
		// The whole prompt tokenizes to the segments' ids.
		if got, want := encodeSegments(tok, segs), tok.Encode(nil, want); !slices.Equal(got, want) {
			t.Errorf("%s: segment-wise ids %v, whole %v", name, got, want)
		}
	}
	gen := "<|start|>assistant"

	// test_simple_convo (with test_reasoning_system_message_with_dates's
	// date line): one user turn, medium effort by default.
	f("single user turn", []Message{{Role: "user", Content: "What is 2 + 2?"}}, Options{AddGenerationPrompt: true},
		harmonySystem("medium", false)+"<|start|>user<|message|>What is 2 + 2?<|end|>"+gen)

	// test_simple_convo_low_effort and _high_effort: the system message
	// becomes the developer message's instructions; reasoning_effort the
	// request's own field.
	for _, effort := range []string{"low", "high"} {
		f("system, effort "+effort, []Message{
			{Role: "system", Content: "Answer the user's questions like a robot."},
			{Role: "user", Content: "What is the capital of the largest country in the world?"},
		}, Options{ReasoningEffort: effort},
			harmonySystem(effort, false)+"<|start|>developer<|message|># Instructions\n\nAnswer the user's questions like a robot.<|end|>"+
				"<|start|>user<|message|>What is the capital of the largest country in the world?<|end|>"+gen)
	}
	// chat_template_kwargs do not reach harmony: vLLM's harmony path
	// reads the request's reasoning_effort only.
	f("kwargs ignored", []Message{{Role: "user", Content: "x"}}, Options{Kwargs: `{"reasoning_effort":"high"}`},
		harmonySystem("medium", false)+"<|start|>user<|message|>x<|end|>"+gen)

	// test_dropping_cot_by_default: an earlier turn's reasoning is
	// dropped (its answer on the final channel is kept); a later system
	// message is a system message of text.
	cot := []Message{
		{Role: "user", Content: "What is 2 + 2?"},
		{Role: "assistant", Content: "2 + 2 equals 4.", Reasoning: `User asks a simple question: "What is 2 + 2?" The answer: 4.`, HasReasoning: true},
		{Role: "user", Content: "What about 9 / 2?"},
	}
	f("earlier reasoning dropped", cot, Options{},
		harmonySystem("medium", false)+"<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 equals 4.<|end|>"+
			"<|start|>user<|message|>What about 9 / 2?<|end|>"+gen)
	// The reasoning of the last turn goes too when the turn has its final
	// answer (vLLM drops every analysis before the last final message).
	f("last turn's reasoning dropped", cot[:2], Options{},
		harmonySystem("medium", false)+"<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 equals 4.<|end|>"+gen)
	// test_keep_analysis_between_finals's conversation: openai_harmony
	// alone keeps "thinking 3+5" (it drops analysis before the first
	// final only); vLLM's auto_drop_analysis_messages drops it.
	f("analysis between finals", []Message{
		{Role: "user", Content: "What is 2 + 2?"}, {Role: "assistant", Content: "4"},
		{Role: "user", Content: "What is 3 + 5?"}, {Role: "assistant", Content: "8", Reasoning: "thinking 3+5", HasReasoning: true},
	}, Options{},
		harmonySystem("medium", false)+"<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>4<|end|>"+
			"<|start|>user<|message|>What is 3 + 5?<|end|><|start|>assistant<|channel|>final<|message|>8<|end|>"+gen)
	// Reasoning alone (no final answer after it) is kept; so is a later
	// system message, as text.
	f("reasoning kept", []Message{
		{Role: "user", Content: "Hi"}, {Role: "system", Content: "Be terse."},
		{Role: "assistant", Reasoning: "Greeting.", HasReasoning: true},
	}, Options{},
		harmonySystem("medium", false)+"<|start|>user<|message|>Hi<|end|><|start|>system<|message|>Be terse.<|end|>"+
			"<|start|>assistant<|channel|>analysis<|message|>Greeting.<|end|>"+gen)

	// test_does_not_drop_if_ongoing_analysis: reasoning, a tool call
	// (vLLM: content type json, <|call|>), the tool's answer.
	call := withExtra(Message{Role: "assistant", Reasoning: "User asks: “What is the weather in SF?” We need to use lookup_weather tool.", HasReasoning: true},
		Extra{ToolCalls: `[{"id":"call_1","type":"function","function":{"name":"lookup_weather","arguments":"{\"location\": \"San Francisco\"}"}}]`})
	answer := withExtra(Message{Role: "tool", Content: `{"temperature": 20, "description": "sunny"}`}, Extra{ToolCallID: "call_1", HasToolCallID: true})
	toolConv := []Message{{Role: "user", Content: "What is the weather in SF?"}, call, answer}
	wantTool := harmonySystem("medium", false) + "<|start|>user<|message|>What is the weather in SF?<|end|>" +
		"<|start|>assistant<|channel|>analysis<|message|>User asks: “What is the weather in SF?” We need to use lookup_weather tool.<|end|>" +
		"<|start|>assistant to=functions.lookup_weather<|channel|>commentary json<|message|>{\"location\": \"San Francisco\"}<|call|>" +
		"<|start|>functions.lookup_weather to=assistant<|channel|>commentary<|message|>{\"temperature\": 20, \"description\": \"sunny\"}<|end|>"
	f("tool call", toolConv, Options{}, wantTool+gen)
	// The final answer after the tool drops the reasoning before it; a
	// call's content goes to the commentary channel before the reasoning.
	preamble := withExtra(Message{Role: "assistant", Content: "Checking.", Reasoning: "Need weather.", HasReasoning: true},
		Extra{ToolCalls: `[{"id":"a","function":{"name":"w","arguments":"{}"}},{"id":"b","function":{"name":"v","arguments":""}}]`})
	f("calls then final", []Message{
		{Role: "user", Content: "Q"}, preamble,
		withExtra(Message{Role: "tool", Content: "1"}, Extra{ToolCallID: "b", HasToolCallID: true}),
		withExtra(Message{Role: "tool", Content: "2"}, Extra{ToolCallID: "unknown", HasToolCallID: true}),
		{Role: "assistant", Content: "Done."},
	}, Options{},
		harmonySystem("medium", false)+"<|start|>user<|message|>Q<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"+
			"<|start|>assistant to=functions.w<|channel|>commentary json<|message|>{}<|call|>"+
			"<|start|>assistant to=functions.v<|channel|>commentary json<|message|><|call|>"+
			"<|start|>functions.v to=assistant<|channel|>commentary<|message|>1<|end|>"+
			"<|start|>functions. to=assistant<|channel|>commentary<|message|>2<|end|>"+
			"<|start|>assistant<|channel|>final<|message|>Done.<|end|>"+gen)

	// test_render_functions_with_parameters: instructions, high effort,
	// four function tools (no parameters; required and optional
	// properties; an enum with a default; an array; title, examples,
	// nullable, a oneOf property, an object description).
	tools := harmonyFixtureTools
	wantTools := harmonySystem("high", true) + "<|start|>developer<|message|># Instructions\n\nAlways respond in riddles\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n" +
		"// Gets the location of the user.\ntype get_location = () => any;\n\n" +
		"// Gets the current weather in the provided location.\ntype get_current_weather = (_: {\n// The city and state, e.g. San Francisco, CA\nlocation: string,\nformat?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n" +
		"// Gets the current weather in the provided list of locations.\ntype get_multiple_weathers = (_: {\n// List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]\nlocations: string[],\nformat?: \"celsius\" | \"fahrenheit\", // default: celsius\n}) => any;\n\n" +
		"// A function with various complex schemas.\ntype kitchensink = (_: // params object\n{\n// STRING\n//\n// A string\n// Examples:\n// - \"hello\"\n// - \"world\"\nstring?: string,\n// A nullable string\nstring_nullable?: string | null, // default: \"the default\"\nstring_enum?: \"a\" | \"b\" | \"c\",\n// a oneof\n// default: 20\noneof_string_or_number?:\n | string // default: \"default_string_in_oneof\"\n | number // numbers can happen too\n,\n}) => any;\n\n" +
		"} // namespace functions<|end|><|start|>user<|message|>What is the weather like in SF?<|end|>" + gen
	f("functions with parameters", []Message{{Role: "system", Content: "Always respond in riddles"}, {Role: "user", Content: "What is the weather like in SF?"}},
		Options{Tools: tools, ReasoningEffort: "high"}, wantTools)

	// No fixture: by hand from openai_harmony's json_schema_to_typescript.
	// A nested object's properties are indented by four more spaces and
	// its closing brace too (an empty one's by eight), its description
	// is written both above the property and above its brace, an integer
	// is a number, a non-string default is written as JSON, a type list
	// joins its types; no system message: the developer message holds
	// the tools alone.
	nested := `[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"filter":{"type":"object","description":"Filter","properties":{"tags":{"type":"array","items":{"type":"string"}},"limit":{"type":"integer","default":10},"opts":{"type":"object","default":{"a":[1,"x\n"]}}},"required":["tags"]},"id":{"type":["integer","null"]}},"required":["filter"]}}}]`
	f("nested object", []Message{{Role: "user", Content: "find"}}, Options{Tools: nested},
		harmonySystem("medium", true)+"<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"+
			"type search = (_: {\n// Filter\nfilter:     // Filter\n{\n    tags: string[],\n    limit?: number, // default: 10\n    opts?: {\n        }, // default: {\"a\":[1,\"x\\n\"]}\n    },\nid?: number | null,\n}) => any;\n\n"+
			"} // namespace functions<|end|><|start|>user<|message|>find<|end|>"+gen)
	// An empty tools list adds nothing.
	f("empty tools", []Message{{Role: "user", Content: "x"}}, Options{Tools: `[]`},
		harmonySystem("medium", false)+"<|start|>user<|message|>x<|end|>"+gen)
}

func TestHarmonyErrors(t *testing.T) {
	t.Parallel()
	r := harmonyRenderer(t, loadTokenizer(t, "gptoss"))
	f := func(msgs []Message, opt Options, want string) {
		t.Helper()
		dst := make([]Segment, 1, 4)
		segs, err := r.Render(dst, msgs, opt)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v %+v: error %v, want one with %q", msgs, opt, err, want)
		}
		if len(segs) != 1 {
			t.Errorf("Render changed dst on error: %d segments", len(segs))
		}
	}
	u := []Message{{Role: "user", Content: "x"}}
	f(u, Options{ReasoningEffort: "none"}, "reasoning_effort")
	f(u, Options{Tools: `[{"type":"code"}]`}, "tools[0].type")
	f(u, Options{Tools: `[{"type":"function","function":{"description":"d"}}]`}, "tools[0].function.name")
	f([]Message{{Role: "function", Content: "x"}}, Options{}, "messages[0]")
	var re *RoleError
	if _, err := r.Render(nil, []Message{{Role: "user"}, {Role: "bot"}}, Options{}); !errors.As(err, &re) || re.Index != 1 {
		t.Errorf("unknown role: %v, want a RoleError at 1", err)
	}
}

// The date is the clock's, in UTC.
func TestHarmonyDate(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "gptoss")
	r, err := NewHarmony(tok, func() time.Time { return time.Date(2026, 1, 1, 1, 0, 0, 0, time.FixedZone("X", 5*3600)) })
	if err != nil {
		t.Fatal(err)
	}
	segs, err := r.Render(nil, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := joinText(segs); !strings.Contains(got, "Current date: 2025-12-31\n") {
		t.Errorf("prompt %q, want the UTC date 2025-12-31", got)
	}
}

// randomHarmony is randomMessages with tool calls and tool answers.
func randomHarmony(rng *rand.Rand) []Message {
	msgs := randomMessages(rng)
	for i := range msgs {
		switch {
		case msgs[i].Role == "developer" && i > 0:
			msgs[i].Role = "user"
		case msgs[i].Role == "assistant" && rng.IntN(3) == 0:
			msgs[i] = withExtra(msgs[i], Extra{ToolCalls: `[{"id":"c` + string(rune('0'+rng.IntN(3))) + `","function":{"name":"f` + msgs[i].Content[:min(len(msgs[i].Content), 3)] + `","arguments":"{}"}}]`})
		case msgs[i].Role == "tool":
			msgs[i] = withExtra(msgs[i], Extra{ToolCallID: "c" + string(rune('0'+rng.IntN(3))), HasToolCallID: true})
		}
	}
	return msgs
}

// Random conversations: segment-wise ids are the whole prompt's, text
// segments are maximal, and a message end (MsgEnd) is a real prefix: the
// segments up to it are those of the messages up to it (whose rendering
// ends with the generation prompt, two segments, which vLLM always
// appends).
func TestHarmonyProperties(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "gptoss")
	r := harmonyRenderer(t, tok)
	rng := rand.New(rand.NewPCG(5, 6))
	tools := []string{"", `[{"type":"function","function":{"name":"f","description":"d\nline","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}]`}
	ends := 0
	for range 400 {
		msgs := randomHarmony(rng)
		opt := Options{Tools: tools[rng.IntN(2)]}
		segs, err := r.Render(nil, msgs, opt)
		if err != nil {
			t.Fatalf("%+v: %v", msgs, err)
		}
		for i, s := range segs {
			if !s.Special() && (s.Text == "" || (i > 0 && !segs[i-1].Special())) {
				t.Fatalf("text segment %d is empty or follows another: %q", i, segs)
			}
		}
		if got, want := encodeSegments(tok, segs), tok.Encode(nil, joinText(segs)); !slices.Equal(got, want) {
			t.Fatalf("%+v: segment-wise %v, whole %v", msgs, got, want)
		}
		for j, s := range segs {
			if s.MsgEnd < 0 {
				continue
			}
			ends++
			prefix, err := r.Render(nil, msgs[:s.MsgEnd+1], opt)
			if err != nil || len(prefix) < 2 || !sameSegments(prefix[:len(prefix)-2], segs[:j+1]) {
				t.Fatalf("segments through message %d of %+v:\n%q\nrendering of messages[:%d]: %q, %v", s.MsgEnd, msgs, segs[:j+1], s.MsgEnd+1, prefix, err)
			}
		}
	}
	if ends < 400 {
		t.Errorf("only %d message ends in 400 conversations", ends)
	}
}

// sameSegments compares texts and ids (a prefix rendering may name other
// message ends than the whole one: it knows less of what follows).
func sameSegments(a, b []Segment) bool {
	return slices.EqualFunc(a, b, func(x, y Segment) bool { return x.Text == y.Text && x.ID == y.ID })
}

// A tokenizer with harmony's tokens and no chat template renders with
// harmony; --chat-template harmony selects it by name.
func TestHarmonyLoad(t *testing.T) {
	t.Parallel()
	dir := testdata + "models/gptoss"
	tok := loadTokenizer(t, "gptoss")
	r, used, warn, err := LoadTemplate(tok, dir+"/tokenizer.json.gz", "", "")
	if err != nil || warn != nil || used != Harmony || r.Name() != Harmony {
		t.Errorf("detected %q (warn %v, err %v), want harmony", used, warn, err)
	}
	if r.Wants() != WantParts|WantExtras {
		t.Errorf("Wants %v, want parts and extras", r.Wants())
	}
	if r, used, _, err := Load(tok, dir+"/tokenizer.json.gz", Harmony); err != nil || used != Harmony || r.Name() != Harmony {
		t.Errorf("by name: %q %v", used, err)
	}
	// Without the config file, the tokens decide too.
	tmp := t.TempDir()
	raw, err := os.ReadFile(dir + "/tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "tokenizer.json.gz"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, used, warn, _ := Load(tok, filepath.Join(tmp, "tokenizer.json.gz"), ""); used != Harmony || warn != nil {
		t.Errorf("no config: %q (warn %v), want harmony", used, warn)
	}
	// Another tokenizer without a template still falls back to none.
	if _, used, warn, _ := Load(loadTokenizer(t, "mistral7b"), filepath.Join(tmp, "tokenizer.json.gz"), ""); used != None || warn == nil {
		t.Errorf("mistral7b without config: %q (warn %v), want none and a warning", used, warn)
	}
}

// openai_harmony's test_simple_tool_call fixture holds the ids its own
// tokenizer gives an assistant's analysis and a call (a recipient after
// the role, a content type after the channel): this tokenizer gives the
// same ids for the same text, so the text runs the renderer joins (the
// library encodes role, recipient and content type one by one) tokenize
// as the library's pieces do.
func TestHarmonyFixtureIDs(t *testing.T) {
	t.Parallel()
	tok := loadTokenizer(t, "gptoss")
	text := `<|channel|>analysis<|message|>User asks: "What is the weather in Tokyo?" We need to use lookup_weather tool.<|return|>` +
		`<|start|>assistant to=lookup_weather<|channel|>analysis code<|message|>{"location": "Tokyo"}`
	want := []int32{200005, 35644, 200008, 1844, 31064, 25, 392, 4827, 382, 290,
		11122, 306, 40510, 16842, 1416, 1309, 316, 1199, 37342, 170154,
		4584, 13, 200002, 200006, 173781, 316, 28, 29712, 170154, 200005,
		35644, 3490, 200008, 10848, 7693, 1243, 392, 173844, 18583}
	if got := tok.Encode(nil, text); !slices.Equal(got, want) {
		t.Errorf("ids %v\nwant %v", got, want)
	}
}

// FuzzHarmonyTools: any tools list and reasoning effort render or
// return an error, never panic, and render the same twice (the second
// time from the kept rendering).
func FuzzHarmonyTools(f *testing.F) {
	f.Add(harmonyFixtureTools, "high")
	f.Add(`[{"type":"function","function":{"name":"f","parameters":{"oneOf":[{"type":"object","nullable":true,"default":"x","enum":["x"]},{"type":["string",1]}],"properties":5}}}]`, "")
	f.Add(`[{"type":"function","function":{"name":"g","description":"a\r\nb\n","parameters":{"type":"object","properties":{"p":{"oneOf":[{"description":"d"}],"description":"d","default":[1,{"k":"\u0001"}],"examples":[1,"e"]}},"required":[1,"p"]}}}]`, "low")
	f.Add(`[{"type":"function"}]`, "none")
	f.Add(`[]`, "medium")
	r := harmonyRenderer(f, loadTokenizer(f, "gptoss"))
	msgs := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	f.Fuzz(func(t *testing.T, tools, effort string) {
		var p fastjson.Parser
		v, err := p.Parse(tools)
		if err != nil || v.Type() != fastjson.TypeArray {
			return // the decoders keep only an array
		}
		opt := Options{Tools: CanonicalJSON([]byte(tools)), ReasoningEffort: effort}
		a, aerr := r.Render(nil, msgs, opt)
		b, berr := r.Render(nil, msgs, opt)
		if (aerr == nil) != (berr == nil) || !slices.Equal(a, b) {
			t.Fatalf("two renderings differ: %v %v\n%q\n%q", aerr, berr, a, b)
		}
	})
}
