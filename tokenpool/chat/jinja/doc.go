// Package jinja renders Jinja chat templates exactly as Python's jinja2
// does in the environment HuggingFace transformers gives them.
//
// It sits under tokenpool/chat: a model's own chat template (the
// chat_template of its tokenizer_config.json) is compiled once at start
// by Parse, and each request's messages render through it (Render) into
// the prompt string that chat splits into segments for routing. A
// Template is immutable; each rendering's state is its own.
//
// The environment is transformers' (_compile_jinja_template):
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on,
// keep_trailing_newline off, the loopcontrols extension ({% break %},
// {% continue %}), its {% generation %} block (rendered as its body),
// raise_exception (a *RaisedError with the template's message),
// strftime_now and its own tojson (json.dumps with ensure_ascii off). As
// in jinja2: conditional expressions anywhere, Python's operator
// precedence, chained comparisons, tests, filters, macros, namespace,
// for/else with loop filters and tuple unpacking, block set, filter and
// with blocks; Python's str, dict and list methods, the sandbox refusing
// those that change a value (list.append); values printed as Python
// prints them (None, True, ['a', 1], {'k': 'v'}, 1e-05); dicts in
// insertion order (Map); an undefined name or attribute prints as ""
// and is false, and reading its attribute is an error.
//
// Not supported, as no chat template seen uses them: template
// inheritance and includes (a chat template is one source), recursive
// loops, call blocks, *args and **kwargs in calls, a macro's varargs and
// kwargs, str.format's format specs, groupby and the HTML filters but
// escape; each is a parse or render error. The filters that return
// Python generators (map, select, unique, ...) return lazy, single-use
// iterators here too, true even when empty. Known differences, also
// unseen in chat templates: integers are 64-bit (Python's grow; past
// int64 is an error); dict.items(), keys() and values() are lists and
// range() a list (Python prints them as dict_items([...]) and range(0,
// 3)); a tuple cannot be a dict key. safe and escape return a Markup as
// jinja2's do (markupsafe's: a plain string added to it with + is escaped,
// as functionary v3.1's template relies on); a few filters and methods
// that would keep it a Markup give its plain text.
//
// A template is an operator's file and its data a client's request: a
// rendering stops with an error past MaxOutput bytes of output, MaxSteps
// loop iterations and macro calls, macro recursion 100 deep, or a
// range() of more than jinja2's sandbox limit (100,000); a panic inside
// the engine is recovered into an error.
//
// # Concurrency
//
// A Template is safe for concurrent use: Render reads it and keeps its
// state in values of its own. The variables given to Render are only
// read.
package jinja
