package codec

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"llmgate/internal/api/anthropic"
	"llmgate/internal/api/openai"
	"llmgate/internal/apierror"
	"llmgate/internal/jsonscan"
	"llmgate/internal/translate"
)

// Encoder writes decoded events in the client's dialect. One is made per
// answer; it may keep state (a stream translator). The stream methods
// append to dst, so that a passthrough stream allocates nothing per event.
type Encoder interface {
	// Event appends the client events for one decoded event. An error
	// ends the answer: the relay then writes Fail.
	Event(dst []translate.Event, ev Event) ([]translate.Event, error)
	// End appends the events that close a complete stream ([DONE],
	// message_stop, response.completed).
	End(dst []translate.Event) []translate.Event
	// Fail appends the events that end a stream which failed after it
	// began: the dialect's error event.
	Fail(dst []translate.Event, e *apierror.Error) []translate.Event
	// Body returns a whole non-streaming answer from its one event.
	Body(ev Event) ([]byte, error)
}

// EncodeOptions carries what some encoders need beyond the request.
type EncodeOptions struct {
	// InputTokens is the prompt size to announce in a translated Messages
	// stream's message_start, before the backend's count arrives.
	InputTokens int
	// StoredID, when set, is the id under which a Responses answer is
	// stored; Save stores it, before its last bytes are written.
	StoredID string
	Save     func(*openai.Response)
}

// NewEncoder returns the encoder of r's dialect for events of form f.
func NewEncoder(r *Request, f Form, opt EncodeOptions) Encoder {
	switch {
	case f == FormAnthropic:
		return anthropicIdentity{model: r.Model}
	case r.Dialect == Messages:
		return &toAnthropic{model: r.Model, input: opt.InputTokens}
	case r.Dialect == Responses:
		return &toResponses{req: r.ResponsesReq, opt: opt}
	default:
		return openaiIdentity{wantsUsage: r.WantsUsage, model: r.Model}
	}
}

// WriteError renders err in dialect d's error envelope, with its status
// and headers.
func WriteError(d Dialect, w http.ResponseWriter, err error) {
	if d.Anthropic() {
		anthropic.WriteError(w, err)
		return
	}
	openai.WriteError(w, err)
}

// openaiIdentity passes OpenAI chunks and bodies through, dropping the
// usage chunk the gateway asked for when the client did not, and naming
// the model the client asked for (see publicModel).
type openaiIdentity struct {
	wantsUsage bool
	model      string
}

func (e openaiIdentity) Event(dst []translate.Event, ev Event) ([]translate.Event, error) {
	if ev.Data == nil || ev.UsageOnly && !e.wantsUsage {
		return dst, nil
	}
	return append(dst, translate.Event{Data: publicModel(ev.Data, e.model)}), nil
}

// publicModel returns a chunk or body whose top-level "model" is
// the public name the client asked for, as the translated dialects
// (Messages, Responses) answer: the backend names its own model (the
// deployment's upstream_model), which the client never asked for. A
// document that already names it, or has no model, is returned as is,
// without a copy.
func publicModel(data []byte, model string) []byte {
	if model == "" || len(data) == 0 || data[0] != '{' {
		return data
	}
	// The common case, and the only cost on the hot path: engines write
	// compact JSON and are mostly deployed under the public name.
	if i := bytes.Index(data, modelKey); i >= 0 && bytes.HasPrefix(data[i+len(modelKey):], []byte(model)) &&
		bytes.HasPrefix(data[i+len(modelKey)+len(model):], []byte{'"'}) && !strings.ContainsAny(model, `"\`) {
		return data
	}
	spans, err := jsonscan.Find(data, "model")
	if err != nil || !spans[0].Valid() {
		return data
	}
	if v, ok := jsonscan.String(data, spans[0]); !ok || v == model {
		return data
	}
	q, err := json.Marshal(model)
	if err != nil {
		return data
	}
	return jsonscan.Replace(data, spans[0], q)
}

// modelKey starts a compact "model" member.
var modelKey = []byte(`"model":"`)

func (openaiIdentity) End(dst []translate.Event) []translate.Event {
	return append(dst, translate.Event{Data: translate.Done})
}

func (openaiIdentity) Fail(dst []translate.Event, e *apierror.Error) []translate.Event {
	return append(dst, translate.Event{Data: openai.MarshalError(e)})
}

func (e openaiIdentity) Body(ev Event) ([]byte, error) { return publicModel(ev.Data, e.model), nil }

// anthropicIdentity passes an Anthropic backend's events and bodies to an
// Anthropic client, naming the model the client asked for (in a body's
// "model" and in message_start's message.model), as every other dialect
// pair answers.
type anthropicIdentity struct{ model string }

func (e anthropicIdentity) Event(dst []translate.Event, ev Event) ([]translate.Event, error) {
	if ev.Data == nil {
		return dst, nil
	}
	data := ev.Data
	if ev.Name == "message_start" {
		data = publicMessageModel(data, e.model)
	}
	return append(dst, translate.Event{Name: ev.Name, Data: data}), nil
}

// publicMessageModel is publicModel for the message object inside an
// Anthropic message_start event.
func publicMessageModel(data []byte, model string) []byte {
	spans, err := jsonscan.Find(data, "message")
	if err != nil || !spans[0].Valid() {
		return data
	}
	msg := data[spans[0].Start:spans[0].End]
	fixed := publicModel(msg, model)
	if len(fixed) == len(msg) && bytes.Equal(fixed, msg) {
		return data
	}
	return jsonscan.Replace(data, spans[0], fixed)
}

// End adds nothing: the backend's message_stop was the last event.
func (anthropicIdentity) End(dst []translate.Event) []translate.Event { return dst }

func (anthropicIdentity) Fail(dst []translate.Event, e *apierror.Error) []translate.Event {
	return append(dst, translate.Event{Name: "error", Data: anthropic.MarshalError(e)})
}

func (e anthropicIdentity) Body(ev Event) ([]byte, error) { return publicModel(ev.Data, e.model), nil }

// toAnthropic turns OpenAI chat into Anthropic Messages answers.
type toAnthropic struct {
	model string
	input int
	t     *translate.ChatToAnthropicStream
}

func (e *toAnthropic) stream() *translate.ChatToAnthropicStream {
	if e.t == nil {
		e.t = translate.NewChatToAnthropicStream(e.model, e.input)
	}
	return e.t
}

func (e *toAnthropic) Event(dst []translate.Event, ev Event) ([]translate.Event, error) {
	if ev.Data == nil {
		return dst, nil
	}
	out, err := e.stream().Feed(ev.Data)
	return append(dst, out...), err
}

func (e *toAnthropic) End(dst []translate.Event) []translate.Event {
	return append(dst, e.stream().Finish(nil)...)
}

func (e *toAnthropic) Fail(dst []translate.Event, err *apierror.Error) []translate.Event {
	return append(dst, e.stream().Finish(err)...)
}

func (e *toAnthropic) Body(ev Event) ([]byte, error) {
	msg, err := translate.ChatBodyToAnthropic(ev.Data, e.model)
	if err != nil {
		return nil, err
	}
	return json.Marshal(msg)
}

// toResponses turns OpenAI chat into Responses API answers, storing the
// response (when asked) before its last bytes are written.
type toResponses struct {
	req   *openai.ResponsesRequest
	opt   EncodeOptions
	t     *translate.ChatToResponsesStream
	saved bool
}

func (e *toResponses) stream() *translate.ChatToResponsesStream {
	if e.t == nil {
		e.t = translate.NewChatToResponsesStream(e.req)
		if e.opt.StoredID != "" {
			e.t.SetStored(e.opt.StoredID)
		}
	}
	return e.t
}

func (e *toResponses) Event(dst []translate.Event, ev Event) ([]translate.Event, error) {
	if ev.Data == nil {
		return dst, nil
	}
	out, err := e.stream().Feed(ev.Data)
	return append(dst, out...), err
}

func (e *toResponses) End(dst []translate.Event) []translate.Event {
	return append(dst, e.finish(nil)...)
}

func (e *toResponses) Fail(dst []translate.Event, err *apierror.Error) []translate.Event {
	return append(dst, e.finish(err)...)
}

func (e *toResponses) finish(err error) []translate.Event {
	t := e.stream()
	evs := t.Finish(err)
	if evs != nil && !e.saved && e.opt.Save != nil {
		e.saved = true
		e.opt.Save(t.Response())
	}
	return evs
}

func (e *toResponses) Body(ev Event) ([]byte, error) {
	var c openai.ChatCompletion
	if err := json.Unmarshal(ev.Data, &c); err != nil {
		return nil, apierror.Newf(http.StatusBadGateway, apierror.KindUpstream, "bad_upstream_response",
			"the backend answered with a completion the gateway cannot read: %v", err)
	}
	out := translate.ChatToResponses(&c, e.req)
	if e.opt.StoredID != "" {
		out.ID, out.Store = e.opt.StoredID, true
		if e.opt.Save != nil {
			e.opt.Save(out)
		}
	}
	return json.Marshal(out)
}
