// Package chat renders a conversation into a model's prompt text through
// the model's own chat template: the Jinja template a tokenizer_config.json
// (chat_template, a string or a list of named templates) or a GGUF file
// (tokenizer.chat_template) carries, executed by a real Jinja engine
// (github.com/ardanlabs/jinja).
//
// Invariants:
//   - Values reach the template as the client sent them, objects with their
//     keys in order (a template that iterates a message's keys, or prints a
//     tool's schema with tojson, sees what Hugging Face's renderer sees).
//   - A template's raise_exception(msg) is a *RaiseError carrying msg: the
//     conversation is one the model does not accept (a server answers 400),
//     not a failure of the server.
//   - Messages, tools or chat_template_kwargs that are not JSON of the
//     expected shape (or nest more than 64 deep) are an error wrapping
//     ErrInput: the request is wrong (a server answers 400). Any other
//     failure while rendering wraps ErrTemplate.
//   - A template that does not compile is an error naming the template's
//     source; a Template is safe for concurrent use.
package chat
