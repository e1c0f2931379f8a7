package connect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// object is a JSON object that keeps its members in file order, so that
// editing one setting does not reorder or drop the user's other settings.
// Values we do not touch stay as the raw bytes read from the file.
type object struct {
	members []member
}

type member struct {
	key   string
	value json.RawMessage
}

// parseObject reads a JSON object; empty input is an empty object.
func parseObject(b []byte) (*object, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return &object{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxErr(b, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := &object{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxErr(b, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxErr(b, err)
		}
		o.setRaw(key, raw)
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntaxErr(b, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return o, nil
}

// syntaxErr adds a line number, which is what a person fixing the file needs.
func syntaxErr(b []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
		return fmt.Errorf("line %d: %w (comments and trailing commas are not JSON)", line, err)
	}
	return err
}

func (o *object) get(key string) (json.RawMessage, bool) {
	for _, m := range o.members {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

func (o *object) setRaw(key string, raw json.RawMessage) {
	for i := range o.members {
		if o.members[i].key == key {
			o.members[i].value = raw
			return
		}
	}
	o.members = append(o.members, member{key, raw})
}

// set stores v unless the stored value already means the same, so an
// unchanged setting keeps its exact original bytes.
func (o *object) set(key string, v any) error {
	raw, err := marshal(v)
	if err != nil {
		return err
	}
	if old, ok := o.get(key); ok && sameJSON(old, raw) {
		return nil
	}
	o.setRaw(key, raw)
	return nil
}

// setDefault stores v only when key is absent.
func (o *object) setDefault(key string, v any) error {
	if _, ok := o.get(key); ok {
		return nil
	}
	return o.set(key, v)
}

// child edits the object stored under key, creating it when absent.
func (o *object) child(key string, edit func(*object) error) error {
	var c *object
	if raw, ok := o.get(key); ok && string(bytes.TrimSpace(raw)) != "null" {
		var err error
		if c, err = parseObject(raw); err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
	} else {
		c = &object{}
	}
	if err := edit(c); err != nil {
		return fmt.Errorf("%s.%w", key, err)
	}
	raw, err := c.MarshalJSON()
	if err != nil {
		return err
	}
	if old, ok := o.get(key); ok && sameJSON(old, raw) {
		return nil
	}
	o.setRaw(key, raw)
	return nil
}

// MarshalJSON writes the members in order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o.members {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// render is the file content: two-space indentation and a final newline.
func (o *object) render() ([]byte, error) {
	raw, err := o.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// marshal encodes without HTML escaping, so URLs and "{env:X}" stay readable.
func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// sameJSON compares two values semantically (key order and spacing aside).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
