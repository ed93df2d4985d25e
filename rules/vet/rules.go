package vet

// Rule is one numbered rule of rules/RULES.md: its number (stable, never
// reused), the rule in one line, and how it is enforced.
type Rule struct {
	ID, Title, Enforced string
}

// Rules are RULES.md's rules, in order (a test checks the two agree).
var Rules = []Rule{
	{"R1", "Every goroutine starts through the supervisor (rules.Group) and ends on shutdown.", "analyzer gostmt; goleak in every package's TestMain (rules/leakcheck)"},
	{"R2", "Never block an event loop: no mutex waits, sleeps, channel sends without a ready receiver, network or file I/O, long tokenization or JSON decoding on a loop.", "analyzer loopblock (the call graph from every loop callback, \"Loop only\" function and function posted to a loop, across the module's packages, with facts); analyzer sleep (time.Sleep anywhere); hooks and closures held in variables review only"},
	{"R3", "Borrowed buffers (gnet Peek/Next, a reactor Request's body, pooled buffers) never outlive the callback or cross a loop.", "analyzer borrowed (gnet Peek/Next stored in a field); review; the race detector in CI"},
	{"R4", "Every queue, channel, map or slice fed from outside has a bound, an overflow policy and a counter.", "review; a test per bound (e.g. reactor mailbox, outbound bytes, tokenizer in-flight)"},
	{"R5", "Every error is handled, or its dropping is justified in a comment.", "analyzer errdrop (a blank assignment of an error)"},
	{"R6", "LockOSThread only where the shard loops start (package reactor).", "analyzer lockos"},
	{"R7", "Cross-loop messages carry values, never pointers into connection buffers.", "analyzer postcapture (a closure posted to a loop capturing a byte slice); review"},
	{"R8", "Every counter incremented on a path is decremented on every exit of it (in-flight counts, pins, pending prefill).", "tests that drive every exit and assert the count returns to zero"},
	{"R9", "A semaphore acquire is followed at once by a deferred (or exit-guaranteed) release.", "analyzer acquire (an acquire not followed by defer release of the same receiver)"},
	{"R10", "Metrics handles are resolved once, never formatted or looked up on the hot path.", "analyzer loopmetrics (no metric resolved or registered by name from a loop function, through the call graph); review off the loops"},
	{"R11", "Timers and callbacks cannot run after their owner stopped.", "tests of Close and shutdown"},
	{"R12", "No package-level mutable state except metrics and sentinel errors.", "analyzer pkgstate (a package-level variable written outside init); review for state mutated through methods"},
	{"R13", "Long loops on an event loop are bounded or split across ticks.", "review"},
	{"R14", "String-to-number conversions of client input go through validating helpers.", "analyzer numparse (a strconv conversion's error dropped); review; fuzz tests of every parser"},
	{"R15", "Metrics are unregistered before their owner is torn down.", "tests (backend removal)"},
}
