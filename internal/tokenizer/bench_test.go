/*
Copyright 2026 The kvrouter Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"

	"github.com/kvrouter/kvrouter/test/cputime"
)

// The benchmarks tokenize about 100K tokens of English prose (this repository's docs), Go code
// (the router's sources) and Chinese. With KVROUTER_TOKENIZER_FULL_DIR set they use the full
// tokenizers, which is what the figures in docs/tokenizer.md come from; the pruned fixtures split
// most words into bytes and measure a different workload.
//
//	go test -run '^$' -bench . -benchmem ./internal/tokenizer/

const benchTokens = 100_000

func benchTokenizer(b *testing.B, model string) *Tokenizer {
	b.Helper()
	dir := filepath.Join("testdata", model)
	if full := fullDir(); full != "" {
		dir = filepath.Join(full, model)
	}
	tok, err := LoadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

func readTree(b *testing.B, root, suffix string) []string {
	b.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, suffix) && !strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out = append(out, string(src))
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func chinese(n int) string {
	const chars = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读"
	rs := []rune(chars)
	rng := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteRune(rs[rng.IntN(len(rs))])
		switch rng.IntN(20) {
		case 0:
			sb.WriteString("，")
		case 1:
			sb.WriteString("。\n")
		}
	}
	return sb.String()
}

// corpusOf repeats parts until the text holds benchTokens tokens, then cuts it there.
func corpusOf(b *testing.B, tok *Tokenizer, parts []string) string {
	b.Helper()
	var sb strings.Builder
	n := 0
	for i := 0; n < benchTokens; i++ {
		p := parts[i%len(parts)]
		sb.WriteString(p)
		n += len(tok.Encode(p, false))
	}
	return sb.String()
}

func benchText(b *testing.B, tok *Tokenizer, kind string) string {
	switch kind {
	case "prose":
		return corpusOf(b, tok, readTree(b, filepath.Join("..", "..", "docs"), ".md"))
	case "code":
		return corpusOf(b, tok, readTree(b, filepath.Join("..", "router"), ".go"))
	case "cjk":
		return corpusOf(b, tok, []string{chinese(20_000)})
	}
	b.Fatalf("unknown text %q", kind)
	return ""
}

func BenchmarkEncode(b *testing.B) {
	for _, model := range models {
		tok := benchTokenizer(b, model)
		for _, kind := range []string{"prose", "code", "cjk"} {
			text := benchText(b, tok, kind)
			n := len(tok.Encode(text, false))
			for _, cache := range []string{"warm", "cold"} {
				b.Run(model+"/"+kind+"/"+cache, func(b *testing.B) {
					dst := make([]uint32, 0, n)
					b.SetBytes(int64(len(text)))
					b.ReportAllocs()
					b.ResetTimer()
					cpu0 := cputime.Process()
					for i := 0; i < b.N; i++ {
						if cache == "cold" {
							b.StopTimer()
							tok.model.cache.reset()
							b.StartTimer()
						}
						dst = tok.AppendEncode(dst[:0], text, false)
					}
					cpu := cputime.Process() - cpu0
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
					if cpu > 0 {
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/token")
					}
					b.ReportMetric(float64(n), "tokens")
				})
			}
		}
	}
}

// BenchmarkPretokenize is why the known patterns have scanners: the same split by regexp2.
func BenchmarkPretokenize(b *testing.B) {
	tok := benchTokenizer(b, "llama3")
	text := benchText(b, tok, "prose")
	re := regexp2.MustCompile(patternLlama3, regexp2.None)
	bmpOnce.Do(buildBMP)
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; i < b.N; i++ {
			for j := 0; j < len(text); {
				j = scanLlama3(text, j)
			}
		}
	})
	b.Run("regexp2", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for i := 0; i < b.N; i++ {
			regexPieces(re, text)
		}
	})
}

func BenchmarkLoad(b *testing.B) {
	for _, model := range models {
		dir := filepath.Join("testdata", model)
		if full := fullDir(); full != "" {
			dir = filepath.Join(full, model)
		}
		b.Run(model, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := LoadDir(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
