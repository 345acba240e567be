// Command reprise runs models with captured accelerator graphs.
//
//	reprise serve      an OpenAI-compatible server with continuous batching
//	reprise loadtest   streaming load against a running server
//	reprise generate   continue a prompt, printed as the llama2.c reference does
//	reprise bench      decode steps per batch size and prefill per prompt length, eager and replayed
//	reprise plan       size and plan graph captures under the device's memory budget
//	reprise devices    backends, devices and their capabilities
//
// Every command that runs a model takes --device, --device-memory,
// --device-memory-fraction, --weights, --model and --tokenizer; "reprise
// COMMAND -h" lists a command's flags. The environment variables are in the
// README. Exit status: 0 on success, 2 for a usage error, 1 otherwise.
package main
