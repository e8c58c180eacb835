// The byte-level BPE tokenizer on a hand-made tokenizer.json (fixtures/tokenizer.json: the 256 byte
// symbols, six merges, three added tokens, Qwen2's pre-tokenizer) and the ChatML template. CPU only.
#include <doctest/doctest.h>

#include <cstdlib>

#include "libcommon/errors.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"
#include "libcommon/tokenizer/unicode.hpp"

using namespace ca::tokenizer;

namespace {
std::string fixture() { return std::string(std::getenv("CA_SRC") ? std::getenv("CA_SRC") : ".") + "/tests/nn_cuda/fixtures/tokenizer.json"; }
}  // namespace

TEST_CASE("unicode classes and UTF-8 decoding") {
  CHECK(is_letter('a'));
  CHECK(is_letter(0x00E9));   // é
  CHECK(is_letter(0x4E2D));   // 中
  CHECK(!is_letter('1'));
  CHECK(is_number(0x0663));   // Arabic-Indic three
  CHECK(is_number(0x2163));   // Roman numeral four (Nl)
  CHECK(!is_number('x'));
  CHECK(is_whitespace(0x3000));
  CHECK(!is_whitespace(0x200B));  // zero width space is not White_Space
  auto c = decode_utf8("a\xC3\xA9\xF0\x9F\x98\x80\xFFz");
  REQUIRE(c.size() == 5);
  CHECK(c[1].cp == 0xE9);
  CHECK(c[2].cp == 0x1F600);
  CHECK(c[2].length == 4);
  CHECK(c[3].cp == 0xFFFD);  // an invalid byte stays one entry of one byte
  CHECK(c[4].offset == 8);
  CHECK(encode_utf8(0x1F600) == "\xF0\x9F\x98\x80");
  // Lossy repair: a stray byte, a cut sequence, an overlong 'A' and a surrogate each become U+FFFD.
  CHECK(valid_utf8("a\xC3\xA9\xFFz") == "a\xC3\xA9\xEF\xBF\xBDz");
  CHECK(valid_utf8("x\xE4\xB8") == "x\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(valid_utf8("\xC1\x81") == "\xEF\xBF\xBD");
  CHECK(valid_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD");
  CHECK(valid_utf8("\xF0\x9F\x98\x80 ok") == "\xF0\x9F\x98\x80 ok");
}

TEST_CASE("Qwen2 pre-tokenizer splits as its regex does") {
  auto tok = Tokenizer::from_file(fixture());
  std::vector<std::string> want = {"Hello", " world", "'s", " ", " test", "\n\n", " ", " x", "1", "2", "3", " (", "foo", ")"};
  CHECK(tok.pre_tokenize("Hello world's  test\n\n  x123 (foo)") == want);
  // contractions are case-insensitive; punctuation runs keep their trailing newlines; trailing spaces
  std::vector<std::string> want2 = {"I", "'M", " ok", "!!\n", "\tx", "   "};
  CHECK(tok.pre_tokenize("I'M ok!!\n\tx   ") == want2);
  std::vector<std::string> want3 = {"int", " main", "()", " {\n", "   ", " return", " ", "0", ";\n", "}"};
  CHECK(tok.pre_tokenize("int main() {\n    return 0;\n}") == want3);
  std::vector<std::string> want4 = {"\xE4\xB8\xAD\xE6\x96\x87", "\xEF\xBC\x8C" "caf\xC3\xA9"};  // 中文 | ，café
  CHECK(tok.pre_tokenize("\xE4\xB8\xAD\xE6\x96\x87\xEF\xBC\x8C" "caf\xC3\xA9") == want4);
}

TEST_CASE("BPE merges by rank and added tokens match first") {
  auto tok = Tokenizer::from_file(fixture());
  CHECK(tok.vocab_size() == 303);
  const int the = tok.token_id("\xC4\xA0the"), t = tok.token_id("\xC4\xA0t"), h = tok.token_id("h"), ing = tok.token_id("ing");
  REQUIRE(the == 258);
  REQUIRE(t == 256);
  REQUIRE(ing == 260);
  CHECK(tok.encode(" the thing<|endoftext|>") == std::vector<int>{the, t, h, ing, 300});
  CHECK(tok.encode("<|im_start|>user\n") == std::vector<int>{301, 'u', 's', 'e', 'r', 10});
  CHECK(tok.encode("") == std::vector<int>{});
  CHECK(tok.decode({301, the, 302}) == "<|im_start|> the<|im_end|>");
  CHECK(tok.decode({301, the, 302}, true) == " the");
  CHECK(tok.is_special(300));
  CHECK(!tok.is_special(the));
  CHECK_THROWS_AS(tok.token(303), ca::InputError);
}

TEST_CASE("decode(encode(text)) is the text, for code, prose and any UTF-8") {
  auto tok = Tokenizer::from_file(fixture());
  for (std::string s : {std::string("__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n"),
                        std::string("The thing's   \t\r\n  spacing\n\n\n"), std::string("\xF0\x9F\x98\x80 emoji, \xE4\xB8\xAD\xE6\x96\x87"),
                        std::string("<|im_start|>assistant\nthe thing<|im_end|>\n"), std::string("  leading and trailing  ")}) {
    CAPTURE(s);
    CHECK(tok.decode(tok.encode(s)) == s);
  }
  // Two of a character's three bytes (where a sampler may stop) decode to valid UTF-8.
  CHECK(tok.decode(tok.encode("a\xE4\xB8")) == "a\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("tokenizer.json that the native tokenizer cannot honour is refused by name") {
  ca::Json j = ca::Json::parse(R"({"model": {"type": "Unigram", "vocab": []}})");
  CHECK_THROWS_WITH_AS(Tokenizer::from_json(j, "x.json"), doctest::Contains("not BPE"), ca::InputError);
  ca::Json k = ca::Json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}}})");
  CHECK_THROWS_WITH_AS(Tokenizer::from_json(k, "x.json"), doctest::Contains("regex"), ca::InputError);
}

TEST_CASE("Qwen ChatML template") {
  std::vector<ChatMessage> m = {{"user", "hi"}};
  CHECK(chatml(m, {true}) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  std::vector<ChatMessage> m2 = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"tool", "r1"}, {"tool", "r2"}};
  CHECK(chatml(m2, {false, ""}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n");
  CHECK_THROWS_AS(chatml({{"robot", "x"}}), ca::InputError);
}
