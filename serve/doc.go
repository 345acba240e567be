// Package serve is reprise's OpenAI-compatible HTTP API over an engine:
// the engine batches requests continuously (they join and leave the running
// batch at every step) and this package turns HTTP requests into engine
// requests and their tokens back into OpenAI responses.
//
// # Endpoints
//
//   - POST /v1/completions: prompt is a string or an array of one string.
//   - POST /v1/chat/completions: messages (roles system, developer, user,
//     assistant; content a string or an array of text parts).
//   - GET /v1/models and GET /v1/models/{model}: the one model served
//     (max_model_len, and chat_template: "model" when chat requests render
//     through the model's template, else how messages are joined).
//   - POST /tokenize and POST /detokenize (vLLM's shapes, outside /v1, so
//     without the API key): {"prompt": TEXT, "add_special_tokens": true} or
//     {"messages": [...], "add_generation_prompt": true,
//     "chat_template_kwargs": {...}} gives {"tokens": [...], "count": N,
//     "max_model_len": M}; {"tokens": [...]} gives {"prompt": TEXT}.
//   - GET /health: 200 {"status": "ok", ...} while serving, 503
//     {"status": "draining"} after Drain, 503 {"status": "not_ready",
//     "reason": ...} while graphs are required
//     (REPRISE_REQUIRE_ACCELERATOR_GRAPHS=1) and background capture has
//     buckets still to make live, or once the engine stopped on its own.
//   - GET /metrics: Prometheus metrics (text, OpenMetrics or protobuf, as
//     the scraper asks): vLLM's set under reprise_ names with a model_name
//     label (time to first token, inter-token latency, time per output
//     token, end-to-end, queue, prefill and decode times, token counters,
//     running and waiting requests, KV-cache usage, per graph bucket
//     replays, real and padding rows, eager fallbacks by reason, capture
//     time, live buckets), beside Go's runtime and process collectors.
//
// Both generation endpoints answer whole or, with "stream": true, as
// server-sent events in OpenAI's format: each chunk is "data: {json}\n\n"
// and the stream ends with "data: [DONE]\n\n". Non-streaming answers carry
// usage (prompt_tokens, completion_tokens, total_tokens); streams carry it
// in a last chunk (with empty choices) when stream_options.include_usage is
// true.
//
// # Parameters
//
// model (optional; another name than the served one is a 404), prompt (a
// string, an array of one string, or token ids, flat or in an array of
// one) or messages, max_tokens and max_completion_tokens (a completion that
// does not say gets 16 as with OpenAI, a chat every position the prompt
// leaves), temperature (0 to 2, default 1 as with OpenAI; 0 is greedy),
// top_p (greater than 0, at most 1), top_k (vLLM's: keep the k most likely
// tokens, 0 is off), seed (the same seed, parameters and prompt give the
// same text, alone or batched, eager or replayed; without one the server
// draws a random seed), stop (a string or up to 4: sequences matched on the
// decoded text; the match is not returned, finish_reason is "stop", and the
// request is cancelled so its KV pages free at once), stop_token_ids and
// ignore_eos (vLLM's), n (1 to 16 choices, choice i seeded with seed+i),
// best_of (at least n: the n of the highest cumulative log-probability), echo, logprobs and top_logprobs (OpenAI's
// shapes, streamed too), presence_penalty, frequency_penalty, logit_bias,
// and vLLM's repetition_penalty, min_p and min_tokens (engine.Penalties),
// stream and stream_options. Parameters that would
// change results in a way the server does not implement are refused with
// 400: suffix, tools, functions, tool_choice other
// than "none" or "auto", response_format other than {"type": "text"},
// audio, prediction, modalities other than ["text"], reasoning_effort,
// verbosity, web_search_options, and any parameter the server does not
// know. Parameters that do not change results are accepted and ignored:
// user, metadata, store, service_tier, prompt_cache_key,
// prompt_cache_retention, safety_identifier, parallel_tool_calls. A JSON
// null is the same as leaving a parameter out. docs/SERVING.md lists every
// parameter with its status.
//
// # Chat template
//
// With Options.Chat (the model's Jinja template, package chat), a chat
// request's messages render through it, with add_generation_prompt (default
// true), chat_template_kwargs, bos_token and eos_token; a template that
// writes BOS itself gets no second one from the encoder, and a template's
// raise_exception is a 400 carrying its message. Without one (the default
// model, stories260K, is a story generator with no chat format) the
// messages' contents are joined in the order given, separated by "\n", and
// encoded with BOS like a completion prompt: a chat request continues the
// story its messages tell. /v1/models says which.
//
// # Text
//
// A response's text is what the llama2.c reference program prints for the
// generated tokens: the concatenation of Tokenizer.SafePiece(prev, token)
// with prev the previous token (the prompt's last for the first). Greedy
// output (temperature 0) therefore equals `reprise generate` for the same
// prompt and length. finish_reason is "stop" (the model's stop token or a
// stop sequence) or "length" (max_tokens reached).
//
// # Request ids, logs and CORS
//
// A request's id is its X-Request-Id header (printable ASCII, at most 128
// bytes) or a fresh one; the answer echoes it, a completion's id ends with
// it, and the request's one log line (Options.Logger, written when it ends)
// names it. Responses carry system_fingerprint. Browsers may call the API
// from Options.AllowedOrigins (CORS); their preflights are answered before
// the API key is checked.
//
// # Errors
//
// Errors have OpenAI's body, {"error": {"message", "type", "param",
// "code"}}, with a message that says what is wrong and param naming the
// parameter at fault (null when none): 400 for malformed or refused input,
// 401 for a missing or wrong API key (Options.APIKey; /health and /metrics
// stay open), 404 for an unknown path or model, 405 for a wrong method, 413
// for a body over Options.MaxBodyBytes, 429 with Retry-After when the
// engine's queue is full (engine.ErrQueueFull), 503 while shutting down.
//
// # Invariants
//
//   - Nothing reaches the engine unchecked: a request is parsed, checked
//     against the server's limits (prompt tokens, max_tokens cap, the
//     model's positions) and passed through engine.Validate before Submit.
//   - Every request ends with exactly one final event: a response or an
//     error body; for a stream, either one chunk with finish_reason per choice (then
//     the usage chunk if asked) or one error event, followed by
//     "data: [DONE]".
//   - A client that disconnects cancels its request at once: the request's
//     context is the engine request's context, and the engine frees its KV
//     pages before its next step.
//   - A stream never takes text back: text that could be the start of a
//     stop sequence is held until it is known not to be, so the chunks of a
//     stream join to the text of the same request answered whole.
//
// # Connections
//
// Server.HTTPServer is the http.Server to run it in: every phase of a
// connection is bounded. The request, headers and body, must arrive within
// Options.BodyTimeout (a slow or absent body is a 408); each write of a
// response (a whole answer, or one event of a stream) within
// Options.WriteTimeout, so a client that stops reading is cut while a long
// stream that is read is not; an idle keep-alive connection closes after
// DefaultIdleTimeout. An answer to a request whose body was not read to
// its end (a 401, a 404, an error) closes the connection instead of
// draining the body.
//
// The caller owns the http.Server and the engine: for a graceful shutdown
// call Drain, then http.Server.Shutdown with a deadline (in-flight
// requests finish); if the deadline passed, Abort (every generation left
// ends with its final error event, counted by Cut), Shutdown again
// briefly for those events to be written, and http.Server.Close; then
// engine.Close.
package serve
