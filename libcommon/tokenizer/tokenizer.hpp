// A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (GPT-2, Qwen2, Llama-3 style
// pre-tokenizers), and the ChatML template of the Qwen family, so the native policy reads and writes
// the same token ids as a served model.
//
//   auto tok = ca::tokenizer::Tokenizer::from_file("ckpt/tokenizer.json");
//   std::vector<int> ids = tok.encode(ca::tokenizer::chatml({{"user", "hi"}}, {.add_generation_prompt = true}));
//   std::string text = tok.decode(ids);
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::tokenizer {

class Tokenizer {
 public:
  // Throws InputError naming the file and what it cannot use (not BPE, an unknown pre-tokenizer regex, ...).
  static Tokenizer from_file(const std::string& path);
  // nlohmann::json (sorted maps), not ca::Json: a vocabulary has 150,000 keys and ordered objects
  // look keys up in linear time.
  static Tokenizer from_json(const nlohmann::json& j, const std::string& origin = "tokenizer.json");

  // Added tokens (<|im_start|>, ...) in the text are matched first and become their ids; the rest is
  // pre-tokenized, mapped byte-by-byte and merged by BPE. The text should be NFC-normalized (Qwen's
  // normalizer): the native tokenizer does not normalize.
  std::vector<int> encode(const std::string& text) const;
  // Always valid UTF-8: a sequence the byte tokens leave broken becomes U+FFFD (Hugging Face's decode does too).
  std::string decode(const std::vector<int>& ids, bool skip_special = false) const;
  // The pieces the pre-tokenizer's regex cuts the text into (no added-token handling).
  std::vector<std::string> pre_tokenize(const std::string& text) const;

  int vocab_size() const { return int(id_to_token_.size()); }
  int token_id(const std::string& token) const;  // -1 when absent
  const std::string& token(int id) const;        // InputError when out of range
  bool is_special(int id) const;

 private:
  // from_json's steps, on the tokenizer being read (origin names the file in errors).
  int read_vocab_and_merges(const nlohmann::json& m, const std::string& origin);
  int read_added_tokens(const nlohmann::json& j, const std::string& origin, int max_id);
  void read_pre_tokenizer(const nlohmann::json& j, const std::string& origin);
  enum class Split { Gpt2, Qwen2, Llama3 };
  std::vector<int> bpe(const std::string& piece) const;  // piece: raw bytes of one pre-token
  std::vector<std::size_t> split_points(const std::string& text) const;

  Split split_ = Split::Qwen2;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int> merge_rank_;  // "left right" -> rank
  struct Added {
    std::string content;
    int id;
    bool special;
  };
  std::vector<Added> added_;
  std::string byte_to_unicode_[256];
  std::unordered_map<std::string, unsigned char> unicode_to_byte_;
};

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
};
struct ChatTemplateOptions {
  bool add_generation_prompt = false;  // end with "<|im_start|>assistant\n"
  // Qwen2.5's template inserts this system turn when the first message is not one; empty: none.
  std::string default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
};
// Qwen's ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per turn; tool results are user turns
// of "<tool_response>\n...\n</tool_response>" blocks, consecutive ones sharing a turn (Qwen2.5).
std::string chatml(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options = {});

}  // namespace ca::tokenizer
