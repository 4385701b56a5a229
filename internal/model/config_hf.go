// Config from an HF config.json: the family is chosen by `model_type` /
// `architectures`, and each hyper-parameter is read from the key the family
// declares, with the defaults of transformers' config classes. Features the
// forward pass does not implement (MoE, sliding windows, biases the family
// has no place for, RoPE scaling other than the family's) are errors.
package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/draftd/draftd/internal/fileio"
)

// hfJSON is a parsed config.json: every top-level key, undecoded.
type hfJSON map[string]json.RawMessage

// has reports whether key is present and not null.
func (j hfJSON) has(key string) bool {
	v, ok := j[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// get decodes key into dst when present and not null; it reports whether it did.
func (j hfJSON) get(key string, dst any) (bool, error) {
	if key == "" || !j.has(key) {
		return false, nil
	}
	if err := json.Unmarshal(j[key], dst); err != nil {
		return false, fmt.Errorf("%s: %v", key, err)
	}
	return true, nil
}

// maxConfigBytes bounds config.json (real ones are a few kB).
const maxConfigBytes = 16 << 20

// ConfigFromHF reads and validates an HF config.json.
func ConfigFromHF(path string) (*Config, error) {
	if st, err := os.Stat(path); err == nil && st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes; a config.json is at most %d", path, st.Size(), maxConfigBytes)
	}
	data, err := fileio.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var j hfJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := j.config()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// family picks the family from model_type and architectures[0].
func (j hfJSON) family() (*Family, error) {
	var modelType string
	var archs []string
	if _, err := j.get("model_type", &modelType); err != nil {
		return nil, err
	}
	if _, err := j.get("architectures", &archs); err != nil {
		return nil, err
	}
	var byType, byArch *Family
	if modelType != "" {
		if byType = familyBy(modelType, func(f *Family) []string { return f.HFModelTypes }); byType == nil {
			return nil, fmt.Errorf("%w: model_type %q (want one of %s)", ErrUnsupported, modelType,
				supported(func(f *Family) []string { return f.HFModelTypes }))
		}
	}
	if len(archs) > 0 {
		if byArch = familyBy(archs[0], func(f *Family) []string { return f.HFArchitectures }); byArch == nil {
			return nil, fmt.Errorf("%w: architectures[0] %q (want one of %s)", ErrUnsupported, archs[0],
				supported(func(f *Family) []string { return f.HFArchitectures }))
		}
	}
	switch {
	case byType == nil && byArch == nil:
		return nil, fmt.Errorf("no model_type or architectures entry")
	case byType != nil && byArch != nil && byType != byArch:
		return nil, fmt.Errorf("model_type %q and architectures[0] %q name different families", modelType, archs[0])
	case byType != nil:
		return byType, nil
	}
	return byArch, nil
}

func (j hfJSON) config() (*Config, error) {
	fam, err := j.family()
	if err != nil {
		return nil, err
	}
	if err := j.unsupported(fam); err != nil {
		return nil, err
	}
	k := fam.HF
	c := &Config{Arch: fam.Arch, RopeTheta: 10000, BOS: -1, EOS: -1,
		QKNorm: fam.QKNorm, QKVBias: fam.QKVBias, keys: k}
	eps := 1e-6
	for _, f := range []struct {
		key string
		dst any
	}{
		{k.Hidden, &c.Hidden}, {k.Intermediate, &c.Intermediate}, {k.Layers, &c.Layers},
		{k.Heads, &c.Heads}, {k.Vocab, &c.Vocab}, {k.MaxContext, &c.MaxContext},
		{k.RMSEps, &eps}, {k.RopeTheta, &c.RopeTheta},
		{"tie_word_embeddings", &c.TiedEmbed}, {"bos_token_id", &c.BOS},
	} {
		if _, err := j.get(f.key, f.dst); err != nil {
			return nil, err
		}
	}
	c.RMSEps = float32(eps)
	c.EOS = j.firstEOS()
	// HF: an absent num_key_value_heads takes the config class default, a
	// null one means num_attention_heads.
	c.KVHeads = c.Heads
	if _, present := j[k.KVHeads]; !present && fam.HFDefaultKVHeads > 0 {
		c.KVHeads = fam.HFDefaultKVHeads
	}
	if _, err := j.get(k.KVHeads, &c.KVHeads); err != nil {
		return nil, err
	}
	switch ok, err := j.get(k.HeadDim, &c.HeadDim); {
	case err != nil:
		return nil, err
	case !ok && fam.HFDefaultHeadDim > 0:
		c.HeadDim = fam.HFDefaultHeadDim
	case !ok && c.Heads > 0:
		c.HeadDim = c.Hidden / c.Heads
	}
	if err := j.ropeScaling(fam, c); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// unsupported rejects the config.json features the forward pass lacks.
func (j hfJSON) unsupported(fam *Family) error {
	var (
		act                        string
		attnBias, mlpBias, sliding bool
		experts, localExperts      int
		partialRotary              float64 = 1
		layerTypes                 []string
	)
	for _, f := range []struct {
		key string
		dst any
	}{
		{"hidden_act", &act}, {"attention_bias", &attnBias}, {"mlp_bias", &mlpBias},
		{"use_sliding_window", &sliding}, {"num_experts", &experts}, {"num_local_experts", &localExperts},
		{"partial_rotary_factor", &partialRotary}, {"layer_types", &layerTypes},
	} {
		if _, err := j.get(f.key, f.dst); err != nil {
			return err
		}
	}
	switch {
	case experts > 0 || localExperts > 0:
		return fmt.Errorf("%w: mixture-of-experts model (%s)", ErrUnsupported, fam.Arch)
	case sliding:
		return fmt.Errorf("%w: use_sliding_window true", ErrUnsupported)
	case mlpBias:
		return fmt.Errorf("%w: mlp_bias true", ErrUnsupported)
	case attnBias && !fam.QKVBias:
		return fmt.Errorf("%w: attention_bias true (%s with q/k/v/o projection biases)", ErrUnsupported, fam.Arch)
	case act != "" && act != "silu":
		return fmt.Errorf("%w: hidden_act %q (want silu)", ErrUnsupported, act)
	case partialRotary != 1:
		return fmt.Errorf("%w: partial_rotary_factor %g", ErrUnsupported, partialRotary)
	}
	for _, t := range layerTypes {
		if t != "full_attention" {
			return fmt.Errorf("%w: layer_types entry %q (only full_attention)", ErrUnsupported, t)
		}
	}
	return nil
}

// firstEOS is eos_token_id (or the first of a list), -1 when absent.
func (j hfJSON) firstEOS() int {
	var eos int
	if ok, err := j.get("eos_token_id", &eos); ok && err == nil {
		return eos
	}
	var eoss []int
	if ok, err := j.get("eos_token_id", &eoss); ok && err == nil && len(eoss) > 0 {
		return eoss[0]
	}
	return -1
}

// ropeScaling reads rope_scaling (and transformers 5's rope_parameters, of
// which it is an alias): absent, null or type "default" is plain RoPE; a
// type the family implements is parsed; anything else is an error.
func (j hfJSON) ropeScaling(fam *Family, c *Config) error {
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		if !j.has(key) {
			continue
		}
		var rp map[string]json.RawMessage
		if err := json.Unmarshal(j[key], &rp); err != nil {
			return fmt.Errorf("%w: %s %s", ErrUnsupported, key, j[key])
		}
		p := hfJSON(rp)
		typ := "default"
		for _, tk := range []string{"type", "rope_type"} {
			if _, err := p.get(tk, &typ); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		if p.has("rope_theta") {
			var theta float64
			if _, err := p.get("rope_theta", &theta); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if j.has(fam.HF.RopeTheta) && theta != c.RopeTheta {
				return fmt.Errorf("%s.rope_theta %g conflicts with %s %g", key, theta, fam.HF.RopeTheta, c.RopeTheta)
			}
			c.RopeTheta = theta
		}
		allowed := []string{"type", "rope_type", "rope_theta"}
		switch {
		case typ == "default":
		case typ == "llama3" && slices.Contains(fam.RoPEScaling, typ):
			r := &Llama3RoPE{}
			for _, f := range []struct {
				key string
				dst *float64
			}{
				{"factor", &r.Factor}, {"low_freq_factor", &r.LowFreqFactor},
				{"high_freq_factor", &r.HighFreqFactor}, {"original_max_position_embeddings", &r.OriginalMaxPos},
			} {
				ok, err := p.get(f.key, f.dst)
				if err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				if !ok {
					return fmt.Errorf("%s llama3: missing %s", key, f.key)
				}
				allowed = append(allowed, f.key)
			}
			if c.Llama3 != nil && *c.Llama3 != *r {
				return fmt.Errorf("rope_scaling and rope_parameters disagree")
			}
			c.Llama3 = r
		default:
			return fmt.Errorf("%w: %s %s (the %s family implements %v)", ErrUnsupported, key, compactJSON(j[key]), fam.Arch, append([]string{"default"}, fam.RoPEScaling...))
		}
		for k := range rp {
			if !slices.Contains(allowed, k) {
				return fmt.Errorf("%w: %s %s: key %q", ErrUnsupported, key, compactJSON(j[key]), k)
			}
		}
	}
	return nil
}

func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
