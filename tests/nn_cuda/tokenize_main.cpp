// nn-cuda-tokenize TOKENIZER_JSON: reads JSON lines {"text": ...} on stdin, writes {"ids": [...],
// "roundtrip": decode(ids) == text} per line; the device test compares the ids with the tokenizers package.
#include <iostream>
#include <string>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: nn-cuda-tokenize TOKENIZER_JSON < lines.jsonl\n";
    return 1;
  }
  try {
    auto tok = ca::tokenizer::Tokenizer::from_file(argv[1]);
    std::string line;
    while (std::getline(std::cin, line)) {
      auto j = ca::Json::parse(line);
      std::string text = j.at("text").get<std::string>();
      auto ids = tok.encode(text);
      std::cout << ca::Json{{"ids", ids}, {"roundtrip", tok.decode(ids) == text}}.dump() << "\n";
    }
  } catch (const ca::Error& e) {
    std::cerr << "nn-cuda-tokenize: " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "nn-cuda-tokenize: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
