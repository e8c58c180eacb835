// Units of the streaming checkpoint layer (libcommon/nn/checkpoint): small checkpoints byte for byte as
// before, the streamed init bit for bit Model::init_random's, Hugging Face sharding with its index, bf16
// on disk (round to nearest even), range reads through the map, and hostile folders refused by name.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "libcommon/errors.hpp"
#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

using namespace ca::nn;
namespace fs = std::filesystem;

namespace {
Config small(const std::string& type, bool tied, bool critic = false) {
  Config c;
  c.model_type = type;
  c.vocab_size = 13;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.attention_bias = type == "qwen2";
  c.value_head = critic;
  return c;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The way save_model wrote a checkpoint before the streaming writer: one F32 model.safetensors.
void save_the_old_way(const Model<float>& m, const std::string& dir) {
  fs::create_directories(dir);
  ca::TensorMap tensors;
  for (auto& p : m.params()) {
    ca::Tensor t = ca::Tensor::zeros("F32", p.shape);
    std::memcpy(t.data.data(), m.weights.data() + p.offset, p.size * 4);
    tensors.emplace(p.name, std::move(t));
  }
  ca::write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
  ca::write_file_atomic(dir + "/config.json", m.config().to_json().dump(2) + "\n");
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ca::InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("checkpoint: a small model is written byte for byte as before; the streamed init is init_random's") {
  ca::PrivateTempDir dir("ckpt");
  for (auto [type, tied, critic] : {std::tuple{"qwen2", false, false}, std::tuple{"llama", true, false},
                                    std::tuple{"qwen2", false, true}}) {
    Config c = small(type, tied, critic);
    Model<float> m(c);
    m.init_random(17, 0.05);
    const std::string old_dir = dir.path() + "/old", new_dir = dir.path() + "/new", init_dir = dir.path() + "/init";
    for (auto& d : {old_dir, new_dir, init_dir}) fs::remove_all(d);
    save_the_old_way(m, old_dir);
    save_model(m, new_dir);
    fs::create_directories(init_dir);
    for (int threads : {1, 3}) {
      WriteOptions o;
      o.threads = threads;
      o.chunk_elements = 50;  // many chunks per tensor: the stream must still come out in order
      init_random_checkpoint(c, 17, 0.05, init_dir, o);
      CHECK(files_in(init_dir) == std::vector<std::string>{"config.json", "model.safetensors"});
      CHECK(ca::read_file(init_dir + "/model.safetensors") == ca::read_file(old_dir + "/model.safetensors"));
      CHECK(ca::read_file(init_dir + "/config.json") == ca::read_file(old_dir + "/config.json"));
    }
    CHECK(files_in(new_dir) == std::vector<std::string>{"config.json", "model.safetensors"});
    CHECK(ca::read_file(new_dir + "/model.safetensors") == ca::read_file(old_dir + "/model.safetensors"));
    CHECK(ca::read_file(new_dir + "/config.json") == ca::read_file(old_dir + "/config.json"));
  }
}

TEST_CASE("checkpoint: shards and index as Hugging Face writes them; the round trip is exact in f32") {
  ca::PrivateTempDir dir("ckpt");
  Config c = small("qwen2", false);
  Model<float> m(c);
  m.init_random(3, 0.1);
  WriteOptions o;
  o.max_shard_bytes = 2000;  // embed_tokens (13 x 16 x 4 = 832 bytes) and a layer's pieces: several shards
  for (int threads : {1, 4}) {
    const std::string out = dir.path() + "/t" + std::to_string(threads);
    o.threads = threads;
    o.chunk_elements = 37;
    save_model(m, out, o);
    auto index = ca::Json::parse(ca::read_file(out + "/model.safetensors.index.json"));
    std::set<std::string> shard_files;
    uint64_t total = 0;
    std::map<std::string, std::vector<std::string>> by_file;
    for (auto& [name, file] : index["weight_map"].items()) {
      shard_files.insert(file.get<std::string>());
      by_file[file.get<std::string>()].push_back(name);
    }
    for (auto& p : m.params()) total += p.size * 4;
    CHECK(index["metadata"]["total_size"].get<uint64_t>() == total);
    CHECK(index["weight_map"].size() == m.params().size());
    REQUIRE(shard_files.size() > 2);
    const std::size_t n = shard_files.size();
    std::size_t k = 1;
    for (auto& f : shard_files) {  // model-0000K-of-0000N, every one present, each ≤ the limit unless one tensor
      char want[64];
      std::snprintf(want, sizeof want, "model-%05zu-of-%05zu.safetensors", k++, n);
      CHECK(f == want);
      auto h = ca::read_safetensors_header(out + "/" + f);
      CHECK(h.metadata.at("format") == "pt");
      std::vector<std::string> names;
      uint64_t bytes = 0;
      for (auto& [name, info] : h.tensors) {
        names.push_back(name);
        bytes += info.bytes;
      }
      std::sort(by_file[f].begin(), by_file[f].end());
      CHECK(names == by_file[f]);
      CHECK((bytes <= o.max_shard_bytes || names.size() == 1));
    }
    // Layout order is kept across shards: a shard holds a contiguous run of params().
    std::size_t shard_of_prev = 0;
    for (auto& p : m.params()) {
      std::string f = index["weight_map"][p.name];
      std::size_t s = std::stoul(f.substr(6, 5));
      CHECK(s >= shard_of_prev);
      shard_of_prev = s;
    }
    auto back = load_model<float>(out);
    CHECK(back.weights == m.weights);
    CheckpointReader r(out);
    CHECK(r.files().size() == n);
    if (threads == 4) {  // the same bytes whatever the threads
      for (auto& f : shard_files) CHECK(ca::read_file(out + "/" + f) == ca::read_file(dir.path() + "/t1/" + f));
    }
  }
}

TEST_CASE("checkpoint: bf16 on disk rounds to nearest even and says so in config.json") {
  CHECK(ca::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);       // halfway, even below: down
  CHECK(ca::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);   // halfway, even above: up
  CHECK(ca::float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);  // past halfway: up
  ca::PrivateTempDir dir("ckpt");
  Config c = small("qwen2", false);
  Model<float> m(c);
  m.init_random(5, 0.1);
  m.weights[m.param("model.norm.weight").offset] = 1.0f + std::ldexp(1.0f, -8);
  m.weights[m.param("model.norm.weight").offset + 1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  for (uint64_t shard : {uint64_t(5'000'000'000ull), uint64_t(1000)}) {
    const std::string out = dir.path() + "/bf" + std::to_string(shard);
    WriteOptions o;
    o.dtype = "BF16";
    o.max_shard_bytes = shard;
    save_model(m, out, o);
    CHECK(ca::Json::parse(ca::read_file(out + "/config.json"))["torch_dtype"] == "bfloat16");
    CHECK(checkpoint_disk_dtype(out) == "BF16");
    CheckpointReader r(out);
    for (auto& p : m.params()) {
      CHECK(r.info(p.name).dtype == "BF16");
      const uint8_t* raw = r.raw(p.name);
      for (std::size_t i = 0; i < p.size; ++i) {
        uint16_t v;
        std::memcpy(&v, raw + 2 * i, 2);
        REQUIRE(v == ca::float_to_bf16(m.weights[p.offset + i]));
      }
    }
    auto back = load_model<float>(out);
    CHECK(back.weights[m.param("model.norm.weight").offset] == 1.0f);
    CHECK(back.weights[m.param("model.norm.weight").offset + 1] == 1.0f + std::ldexp(1.0f, -6));
  }
  // The streamed init in bf16 is the f32 init rounded.
  WriteOptions o;
  o.dtype = "BF16";
  init_random_checkpoint(c, 9, 0.02, dir.path() + "/init_bf16", o);
  Model<float> ref(c);
  ref.init_random(9, 0.02);
  auto back = load_model<float>(dir.path() + "/init_bf16");
  for (std::size_t i = 0; i < ref.weights.size(); ++i)
    REQUIRE(back.weights[i] == ca::bf16_to_float(ca::float_to_bf16(ref.weights[i])));
}

TEST_CASE("load format dummy: the folder's config.json alone gives init's weights in its dtype, bit for bit") {
  ca::PrivateTempDir dir("ckpt");
  for (const char* dtype : {"F32", "BF16", "F16"})
    for (bool critic : {false, true}) {
      CAPTURE(dtype);
      CAPTURE(critic);
      const Config c = small("qwen2", false, critic);
      const std::string init = dir.path() + "/init_" + dtype + std::to_string(critic), dummy = init + "_dummy";
      WriteOptions o;
      o.dtype = dtype;
      init_random_checkpoint(c, 11, kInitStd, init, o);
      fs::create_directories(dummy);
      fs::copy_file(init + "/config.json", dummy + "/config.json");
      LoadFormat f;
      f.dummy = true;
      f.seed = 11;
      CHECK(load_model<float>(dummy, critic, f).weights == load_model<float>(init, critic).weights);
      CHECK(load_model<double>(dummy, critic, f).weights == load_model<double>(init, critic).weights);
      if (critic) continue;
      // A causal LM opened as a critic: the LM's draw (its head skipped), the value head zero.
      CHECK(load_model<float>(dummy, true, f).weights == load_model<float>(init, true).weights);
      f.seed = 12;
      CHECK(load_model<float>(dummy, false, f).weights != load_model<float>(init).weights);
    }
  // Read in layout order; a skipped range is drawn and dropped, a read behind the stream refused.
  const Config c = small("llama", true);
  Model<float> ref(c);
  ref.init_random(3, kInitStd);
  RandomInitWeights w(c, 3, kInitStd, "F32", "mem");
  CHECK(w.sequential());
  CHECK_FALSE(w.has("lm_head.weight"));  // tied
  const auto& q = ref.param("model.layers.1.self_attn.q_proj.weight");
  std::vector<float> got(5);
  w.read(q.name, 7, 5, got.data());
  CHECK(std::equal(got.begin(), got.end(), ref.weights.begin() + std::ptrdiff_t(q.offset + 7)));
  CHECK_THROWS_AS(w.read(q.name, 0, 1, got.data()), ca::InternalError);
  const auto& k = ref.param("model.layers.1.self_attn.k_proj.weight");
  w.read(k.name, 0, 2, got.data());
  CHECK(std::equal(got.begin(), got.begin() + 2, ref.weights.begin() + std::ptrdiff_t(k.offset)));
  CHECK_THROWS_AS(w.read(k.name, 2, k.size, got.data()), ca::InternalError);  // past its end
}

TEST_CASE("checkpoint reader: ranges of a tensor through the map, in float and double, any float dtype") {
  ca::PrivateTempDir dir("ckpt");
  const std::string d = dir.path() + "/r";
  fs::create_directories(d);
  ca::TensorMap t;
  ca::Tensor a = ca::Tensor::zeros("F32", {7, 5}), h = ca::Tensor::zeros("F16", {9}), g = ca::Tensor::zeros("F64", {3}),
             b = ca::Tensor::zeros("BF16", {4}), i = ca::Tensor::zeros("I32", {2});
  for (int k = 0; k < 35; ++k) a.as<float>()[k] = float(k) * 0.5f - 3;
  for (int k = 0; k < 9; ++k) h.as<uint16_t>()[k] = ca::float_to_fp16(float(k) / 4);
  for (int k = 0; k < 3; ++k) g.as<double>()[k] = 1.0 / 3 + k;
  for (int k = 0; k < 4; ++k) b.as<uint16_t>()[k] = ca::float_to_bf16(float(k) + 0.5f);
  t.emplace("a", a);
  t.emplace("h", h);
  t.emplace("g", g);
  t.emplace("b", b);
  t.emplace("i", i);
  ca::write_safetensors(d + "/model.safetensors", t);
  CheckpointReader r(d);
  CHECK(r.names() == std::vector<std::string>{"a", "b", "g", "h", "i"});
  std::vector<float> out(10, -1);
  r.read("a", 12, 10, out.data());
  for (int k = 0; k < 10; ++k) CHECK(out[k] == float(k + 12) * 0.5f - 3);
  r.read("h", 8, 1, out.data());
  CHECK(out[0] == 2.0f);
  std::vector<double> dd(3);
  r.read("g", 0, 3, dd.data());
  CHECK(dd[2] == 1.0 / 3 + 2);  // F64 to double: not through float
  r.read("b", 1, 3, out.data());
  CHECK(out[2] == 3.5f);
  r.read("a", 35, 0, out.data());  // an empty range at the end is fine
  CHECK_THROWS_AS(r.read("a", 30, 6, out.data()), ca::InternalError);
  CHECK_THROWS_AS(r.read("a", 36, 0, out.data()), ca::InternalError);
  CHECK_THROWS_AS(r.read("i", 0, 1, out.data()), ca::InputError);  // not a float dtype
  // Many ranges at once over threads: the same values.
  std::vector<float> whole(35), parts(35);
  r.read("a", 0, 35, whole.data());
  r.read_parallel<float>({{"a", 0, 20, parts.data()}, {"a", 20, 15, parts.data() + 20}}, 3);
  CHECK(whole == parts);
}

TEST_CASE("checkpoint reader: hostile folders are refused naming the file, and nothing outside is opened") {
  ca::PrivateTempDir dir("ckpt");
  Config c = small("qwen2", false);
  Model<float> m(c);
  m.init_random(1);
  WriteOptions o;
  o.max_shard_bytes = 3000;
  const std::string good = dir.path() + "/good";
  save_model(m, good, o);
  const std::string index_name = "model.safetensors.index.json";
  auto index = ca::Json::parse(ca::read_file(good + "/" + index_name));
  REQUIRE(files_in(good).size() > 4);
  auto copy = [&](const std::string& name) {
    const std::string d = dir.path() + "/" + name;
    fs::copy(good, d);
    return d;
  };
  auto set_index = [&](const std::string& d, const ca::Json& j) { ca::write_file_atomic(d + "/" + index_name, j.dump()); };

  {  // an index naming a missing shard
    auto d = copy("missing");
    std::string f2;
    for (auto& [k, v] : index["weight_map"].items())
      if (std::string(v).find("model-00002-") == 0) f2 = v;
    REQUIRE(fs::remove(d + "/" + f2));
    std::string msg = message_of([&] { CheckpointReader r(d); });
    CHECK(contains(msg, index_name));
    CHECK(contains(msg, f2));
    CHECK_THROWS_AS(load_model<float>(d), ca::InputError);
  }
  {  // a weight_map path with ../ (and an absolute one): refused before opening, even when the file exists
    for (std::string bad : {"../outside.safetensors", "/etc/outside.safetensors", "sub/x.safetensors", ".hidden.safetensors",
                            "model.bin"}) {
      auto d = copy("escape");
      ca::write_safetensors(dir.path() + "/outside.safetensors", {{"model.norm.weight", ca::Tensor::zeros("F32", {16})}});
      auto j = index;
      j["weight_map"]["model.norm.weight"] = bad;
      set_index(d, j);
      std::string msg = message_of([&] { CheckpointReader r(d); });
      CHECK_MESSAGE(contains(msg, "'" + bad + "'"), msg);
      CHECK(contains(msg, index_name));
      fs::remove_all(d);
    }
  }
  {  // a tensor in two shards: the headers of both files hold it
    auto d = copy("twice");
    std::string f1 = index["weight_map"]["model.norm.weight"];
    auto st = ca::read_safetensors(d + "/" + f1);
    std::string other = index["weight_map"]["model.embed_tokens.weight"];
    auto st2 = ca::read_safetensors(d + "/" + other);
    st2.tensors.emplace("model.norm.weight", st.tensors.at("model.norm.weight"));
    ca::write_safetensors(d + "/" + other, st2.tensors, st2.metadata);
    std::string msg = message_of([&] { CheckpointReader r(d); });
    CHECK(contains(msg, "model.norm.weight"));
    CHECK(contains(msg, other));
  }
  {  // a stale shard the index does not name; a tensor the index places in a file that lacks it
    auto d = copy("stale");
    fs::copy_file(d + "/" + std::string(index["weight_map"]["model.norm.weight"]), d + "/zz-old.safetensors");
    CHECK(contains(message_of([&] { CheckpointReader r(d); }), "zz-old.safetensors"));
    fs::remove(d + "/zz-old.safetensors");
    auto j = index;
    j["weight_map"]["model.extra.weight"] = index["weight_map"]["model.norm.weight"];
    set_index(d, j);
    CHECK(contains(message_of([&] { CheckpointReader r(d); }), "model.extra.weight"));
  }
  {  // a FIFO named by the index: refused, not waited on
    auto d = copy("fifo");
    std::string f = index["weight_map"]["model.norm.weight"];
    fs::remove(d + "/" + f);
    REQUIRE(::mkfifo((d + "/" + f).c_str(), 0600) == 0);
    CHECK(contains(message_of([&] { CheckpointReader r(d); }), f));
  }
  // Headers whose ranges overlap, or run past the file, naming the file.
  auto write_raw = [&](const std::string& path, const std::string& header, std::size_t data_bytes) {
    std::string h = header;
    while ((h.size() + 8) % 8) h += ' ';
    uint64_t n = h.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    bytes += h + std::string(data_bytes, '\0');
    ca::write_file_atomic(path, bytes);
  };
  {
    const std::string d = dir.path() + "/overlap";
    fs::create_directories(d);
    write_raw(d + "/model.safetensors",
              R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"y":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 24);
    std::string msg = message_of([&] { CheckpointReader r(d); });
    CHECK(contains(msg, "overlap"));
    CHECK(contains(msg, d + "/model.safetensors"));
    write_raw(d + "/model.safetensors", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12);
    msg = message_of([&] { CheckpointReader r(d); });
    CHECK(contains(msg, "past the end"));
    CHECK(contains(msg, d + "/model.safetensors"));
    write_raw(d + "/model.safetensors", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16);
    std::string text = ca::read_file(d + "/model.safetensors");
    uint64_t huge = text.size();  // the header length says the header is the whole file and more
    std::memcpy(text.data(), &huge, 8);
    ca::write_file_atomic(d + "/model.safetensors", text);
    CHECK(contains(message_of([&] { CheckpointReader r(d); }), "cut short"));
  }
}

TEST_CASE("checkpoint writer: a non-finite value or a failing source leaves nothing behind") {
  ca::PrivateTempDir dir("ckpt");
  std::vector<TensorSpec> specs = {{"a", {100}}, {"b", {50, 2}}, {"c", {10}}};
  for (bool ordered : {false, true}) {
    const std::string d = dir.path() + (ordered ? "/o" : "/u");
    fs::create_directories(d);
    WriteOptions o;
    o.ordered = ordered;
    o.max_shard_bytes = 450;
    o.chunk_elements = 16;
    o.threads = 3;
    std::string msg = message_of([&] {
      write_checkpoint_tensors(d, specs, [&](std::size_t i, std::size_t begin, std::size_t count, float* out) {
        for (std::size_t k = 0; k < count; ++k) out[k] = (i == 1 && begin + k == 77) ? NAN : 1.0f;
      }, o);
    });
    CHECK(contains(msg, "tensor 'b' element 77 is nan"));
    CHECK(files_in(d).empty());
    CHECK_THROWS_AS(write_checkpoint_tensors(d, specs, [&](std::size_t i, std::size_t, std::size_t, float*) {
                      if (i == 2) throw ca::EnvironmentError("source failed");
                    }, o),
                    ca::EnvironmentError);
    CHECK(files_in(d).empty());
    auto written = write_checkpoint_tensors(d, specs, [&](std::size_t i, std::size_t b, std::size_t n, float* out) {
      for (std::size_t k = 0; k < n; ++k) out[k] = float(i * 1000 + b + k);
    }, o);
    CHECK(written == std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});  // 400 | 400 + 40 bytes under 450
    CheckpointReader r(d);
    std::vector<float> v(100);
    r.read("b", 0, 100, v.data());
    for (int k = 0; k < 100; ++k) REQUIRE(v[k] == float(1000 + k));
  }
}

TEST_CASE("InitNormalStream: std::normal_distribution over std::mt19937_64, bit for bit, across its segments") {
  for (int threads : {1, 3}) {
    std::mt19937_64 rng(12345);
    std::normal_distribution<double> normal(0.0, 0.02);
    InitNormalStream stream(12345, 0.02, threads);
    std::vector<float> got(1000003);
    std::size_t mismatches = 0;
    for (int piece = 0; piece < 5; ++piece) {  // 5M values: past the first 4096 x 312-word segments
      stream.next(got.data(), got.size());
      for (float v : got) mismatches += v != float(normal(rng));
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("InitNormalStream: rounded to BF16 by its workers as a writer and reader would; a dtype it cannot round to is refused") {
  InitNormalStream plain(7, 0.02, 2), rounded(7, 0.02, 2, "BF16");
  std::vector<float> a(300001), b(a.size());
  plain.next(a.data(), a.size());
  rounded.next(b.data(), b.size());
  std::vector<uint8_t> disk(a.size() * 2);
  ca::convert_floats(a.data(), a.size(), "BF16", disk.data());
  std::vector<float> want(a.size());
  ca::convert_elements(disk.data(), "BF16", a.size(), want.data());
  std::size_t mismatches = 0, changed = 0;
  for (std::size_t i = 0; i < a.size(); ++i) mismatches += b[i] != want[i], changed += b[i] != a[i];
  CHECK(mismatches == 0);
  CHECK(changed > a.size() / 2);  // bf16 keeps 8 bits of mantissa: most values move
  CHECK_THROWS_AS(InitNormalStream(7, 0.02, 2, "F64"), ca::InputError);
}
