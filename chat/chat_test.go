package chat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/reprise-ml/reprise/chat"
)

func TestTemplateFixtures(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Contexts []json.RawMessage `json:"contexts"`
		Expected []struct {
			Template string  `json:"template"`
			Context  string  `json:"context"`
			Rendered *string `json:"rendered"`
			Error    *string `json:"error"`
		} `json:"expected"`
	}
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatal(err)
	}
	contexts := map[string]chat.Input{}
	for _, raw := range fx.Contexts {
		var c map[string]json.RawMessage
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		var name, bos, eos string
		var agp bool
		json.Unmarshal(c["name"], &name)
		json.Unmarshal(c["bos_token"], &bos)
		json.Unmarshal(c["eos_token"], &eos)
		json.Unmarshal(c["add_generation_prompt"], &agp)
		contexts[name] = chat.Input{Messages: c["messages"], AddGenerationPrompt: agp, BOS: bos, EOS: eos,
			Kwargs: map[string]json.RawMessage{"date_string": c["date_string"]}}
	}
	if len(fx.Expected) < 16 {
		t.Fatalf("%d expected renders, want 16", len(fx.Expected))
	}
	for _, e := range fx.Expected {
		t.Run(e.Template+"/"+e.Context, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata", e.Template+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := chat.Compile(string(src), e.Template)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(contexts[e.Context])
			if e.Error != nil {
				var re *chat.RaiseError
				if !errors.As(err, &re) || re.Message != *e.Error {
					t.Fatalf("Render error = %v, want a RaiseError %q", err, *e.Error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != *e.Rendered {
				t.Errorf("Render =\n%q\nwant\n%q", got, *e.Rendered)
			}
		})
	}
}

func TestBadTemplates(t *testing.T) {
	if _, err := chat.Compile("{% if x %}unclosed", "tokenizer_config.json: chat_template"); !errors.Is(err, chat.ErrTemplate) {
		t.Errorf("Compile of an unclosed if: %v, want ErrTemplate", err)
	}
	tmpl, err := chat.Compile("{{ raise_exception('no ' + messages[0].role) }}", "t")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(chat.Input{Messages: json.RawMessage(`[{"role":"tool"}]`)})
	var re *chat.RaiseError
	if !errors.As(err, &re) || re.Message != "no tool" {
		t.Errorf("Render = %v, want RaiseError \"no tool\"", err)
	}
	for _, bad := range []string{`{"role":"user"}`, `[`, `[1] 2`} {
		if _, err := tmpl.Render(chat.Input{Messages: json.RawMessage(bad)}); err == nil {
			t.Errorf("messages %s: no error", bad)
		}
	}
}

func TestKeyOrderAndKwargs(t *testing.T) {
	tmpl, err := chat.Compile("{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}{{ tools[0] | tojson }}{{ enable_thinking }}", "t")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(chat.Input{
		Messages: json.RawMessage(`[{"z":1,"a":"x","m":true}]`),
		Tools:    json.RawMessage(`[{"name":"f","b":2,"a":1}]`),
		Kwargs:   map[string]json.RawMessage{"enable_thinking": json.RawMessage(`false`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `z=1;a=x;m=True;{"name": "f", "b": 2, "a": 1}False`; got != want {
		t.Errorf("Render = %q, want %q", got, want)
	}
}

func ExampleTemplate_Render() {
	tmpl, _ := chat.Compile("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}", "example")
	out, _ := tmpl.Render(chat.Input{Messages: json.RawMessage(`[{"role":"user","content":"Hi"}]`), AddGenerationPrompt: true})
	fmt.Println(out)
	// Output:
	// <|user|>Hi
	// <|assistant|>
}
