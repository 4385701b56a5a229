package testenv

import "testing"

func TestStrict(t *testing.T) {
	cases := []struct {
		name, strict, ci string
		want             bool
		wantErr          bool
	}{
		{"unset", "", "", false, false},
		{"one", "1", "", true, false},
		{"zero", "0", "", false, false},
		{"zero wins over CI", "0", "true", false, false},
		{"CI=true", "", "true", true, false},
		{"CI=1", "", "1", true, false},
		{"CI=false", "", "false", false, false},
		{"CI=0", "", "0", false, false},
		{"bad value", "yes", "", false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(Var, c.strict)
			t.Setenv("CI", c.ci)
			have, err := Strict()
			if (err != nil) != c.wantErr || have != c.want {
				t.Fatalf("have %v, %v; want %v, error %v", have, err, c.want, c.wantErr)
			}
		})
	}
}
