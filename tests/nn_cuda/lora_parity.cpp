// nn-lora-parity ADAPTER_DIR INPUTS_JSON MODE OUT.safetensors: the native model's outputs with a PEFT
// LoRA adapter folder, for lora_parity.py to compare with transformers + peft (device) or with its own
// plain-torch forward from the files (CPU). The base is the folder the adapter names
// (base_model_name_or_path); a folder without adapter_config.json runs as a plain checkpoint.
//   INPUTS_JSON  {"sequences": [[token ids], ...]}
//   MODE         cpu     Model<float>::forward with the Adapter<float> unmerged (the trainer's CPU path)
//                merged  the adapter merged into the base (load_policy for a policy: what the native
//                        samplers run; merge_adapter into the base loaded as a critic for a critic)
//                f32 | bf16  CUDA: a frozen base with the CudaAdapter (the trainer's GPU path)
//   OUT          out.N: logits [T, V] of sequence N (a policy) or values [T] (a critic), F32; the
//                metadata's "kind" says which.
#include <iostream>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn_cuda/lora.hpp"
#include "libcommon/nn_cuda/model.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace {
ca::Tensor f32_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  ca::Tensor t = ca::Tensor::zeros("F32", std::move(shape));
  std::copy(v.begin(), v.end(), t.as<float>());
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: nn-lora-parity ADAPTER_DIR INPUTS_JSON cpu|merged|f32|bf16 OUT.safetensors\n";
    return 1;
  }
  namespace nn = ca::nn;
  try {
    const std::string dir = argv[1], mode = argv[3];
    if (mode != "cpu" && mode != "merged" && mode != "f32" && mode != "bf16")
      throw ca::UsageError("MODE must be cpu, merged, f32 or bf16, got '" + mode + "'");
    ca::Json in = ca::parse_json(ca::read_file(argv[2]), std::string("'") + argv[2] + "'");
    auto seqs = in.at("sequences").get<std::vector<std::vector<int>>>();

    const bool adapter = nn::is_adapter_dir(dir);
    nn::LoraConfig lc;
    std::string base_dir = dir;
    if (adapter) {
      const std::string cpath = dir + "/adapter_config.json";
      lc = nn::LoraConfig::from_json(ca::parse_json(ca::read_file(cpath), "'" + cpath + "'"), cpath);
      base_dir = nn::adapter_base_dir(lc, dir);
    }
    const bool critic = adapter ? lc.value_head : nn::read_checkpoint_config(base_dir).value_head;

    ca::TensorMap out;
    auto emit = [&](std::size_t i, const std::vector<float>& v, int T, int V) {
      out.emplace("out." + std::to_string(i), critic ? f32_tensor(v, {T}) : f32_tensor(v, {T, V}));
    };
    if (mode == "cpu" || mode == "merged") {
      nn::Model<float> model = nn::load_model<float>(base_dir, mode == "merged" && critic);
      model.release_gradients();
      std::unique_ptr<nn::Adapter<float>> ad;
      if (adapter) {
        ad = std::make_unique<nn::Adapter<float>>(nn::load_adapter<float>(dir, nn::read_checkpoint_config(base_dir)));
        if (mode == "merged") {
          if (critic) {
            nn::merge_adapter(model, *ad);
          } else {
            model = nn::load_policy<float>(dir);  // the samplers' path, whole
          }
          ad.reset();
        }
      }
      const int V = model.config().vocab_size;
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        nn::Activations<float> acts;
        model.forward(seqs[i], acts, ad.get());
        emit(i, critic ? acts.values : acts.logits, int(seqs[i].size()), V);
      }
    } else {
      nn::Model<float> model = nn::load_model<float>(base_dir);
      model.release_gradients();
      ca::nn_cuda::Gpu gpu(0);
      ca::nn_cuda::CudaModelOptions o;
      o.dtype = ca::nn_cuda::parse_dtype(mode);
      o.frozen = adapter;
      ca::nn_cuda::CudaModel m(gpu, model, o);
      std::unique_ptr<ca::nn_cuda::CudaAdapter> gad;
      if (adapter) gad = std::make_unique<ca::nn_cuda::CudaAdapter>(m, nn::load_adapter<float>(dir, model.config()));
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        m.forward(seqs[i], gad.get());
        emit(i, critic ? m.values() : m.logits(), int(seqs[i].size()), model.config().vocab_size);
      }
    }
    ca::write_safetensors(argv[4], out, {{"kind", critic ? "values" : "logits"}, {"mode", mode}});
    std::cerr << "nn-lora-parity: " << mode << ", " << seqs.size() << " sequences, " << (critic ? "values" : "logits") << "\n";
  } catch (const ca::Error& e) {
    std::cerr << "nn-lora-parity: " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "nn-lora-parity: " << e.what() << "\n";
    return 4;
  }
  return 0;
}
