// Reading a cubin's ELF: section sizes, the module-scope objects a kernel can write (and their
// sections), and the functions it calls but does not define.
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "libcommon/bundle/compile.hpp"

namespace ca::bundle {

namespace {

// The few ELF64 fields a cubin's section table needs, every read bounds-checked (a damaged cubin
// throws, and the callers report nothing rather than garbage).
struct Elf64View {
  const std::string& elf;
  uint64_t shoff = 0, shentsize = 0, shnum = 0, shstrndx = 0;
  explicit Elf64View(const std::string& bytes) : elf(bytes) {
    if (elf.size() < 64 || elf.compare(0, 4, "\x7f" "ELF") != 0 || elf[4] != 2) throw std::runtime_error("not ELF64");
    shoff = read(0x28, 8), shentsize = read(0x3A, 2), shnum = read(0x3C, 2), shstrndx = read(0x3E, 2);
    if (shstrndx >= shnum) throw std::runtime_error("no section names");
  }
  uint64_t read(size_t off, size_t n) const {
    if (off + n > elf.size()) throw std::runtime_error("truncated");
    uint64_t v = 0;
    std::memcpy(&v, elf.data() + off, n);
    return v;
  }
  uint64_t section(uint64_t i, uint64_t field, size_t n) const { return read(shoff + i * shentsize + field, n); }
  std::string string_at(uint64_t off) const {
    if (off >= elf.size()) return "";
    return std::string(elf.data() + off, strnlen(elf.data() + off, elf.size() - off));
  }
  std::string section_name(uint64_t i) const { return string_at(section(shstrndx, 0x18, 8) + section(i, 0, 4)); }
  bool is_symtab(uint64_t i) const { return section(i, 0x04, 4) == 2; }  // SHT_SYMTAB

  // A symbol table (section i): its entries, each read where it lies, and their names.
  struct Symbols {
    const Elf64View& v;
    uint64_t off = 0, size = 0, entsize = 0, strtab = 0;
    Symbols(const Elf64View& view, uint64_t i) : v(view) {
      off = v.section(i, 0x18, 8), size = v.section(i, 0x20, 8), entsize = v.section(i, 0x38, 8);
      strtab = v.section(v.section(i, 0x28, 4), 0x18, 8);  // sh_link: its string table
    }
    bool readable() const { return entsize >= 24; }
    uint64_t count() const { return readable() ? size / entsize : 0; }
    uint64_t entry(uint64_t index) const { return off + index * entsize; }  // Elf64_Sym's offset
    std::string name(uint64_t index) const { return v.string_at(strtab + v.read(entry(index), 4)); }
  };
};

}  // namespace

std::map<std::string, int64_t> cubin_sections(const std::string& elf) {
  std::map<std::string, int64_t> out;
  try {
    Elf64View v(elf);
    for (uint64_t i = 0; i < v.shnum; ++i) out[v.section_name(i)] += static_cast<int64_t>(v.section(i, 0x20, 8));
  } catch (const std::exception&) {
  }
  return out;
}

namespace {

// Module data a kernel can write through a generic address: __device__ variables (.nv.global,
// .nv.global.init) and every constant bank but the kernel parameters' (.nv.constant0.<kernel>):
// .nv.constant3 holds __constant__ variables.
bool module_data_section(const std::string& name) {
  if (name == ".nv.global" || name.rfind(".nv.global.", 0) == 0) return true;
  return name.rfind(".nv.constant", 0) == 0 && name.rfind(".nv.constant0", 0) != 0;
}

}  // namespace

std::set<std::string> cubin_undefined_functions(const std::string& elf) {
  std::set<std::string> out;
  try {
    Elf64View v(elf);
    for (uint64_t i = 0; i < v.shnum; ++i) {
      if (!v.is_symtab(i)) continue;
      const Elf64View::Symbols syms(v, i);
      for (uint64_t k = 0; k < syms.count(); ++k) {
        const uint64_t sym = syms.entry(k), shndx = v.read(sym + 6, 2), type = v.read(sym + 4, 1) & 0xf;
        if (shndx != 0 || (type != 2 /* STT_FUNC */ && type != 0 /* STT_NOTYPE */)) continue;
        std::string name = syms.name(k);
        if (!name.empty()) out.insert(name);
      }
    }
  } catch (const std::exception&) {
  }
  return out;
}

namespace {

// Every sized STT_OBJECT symbol in module data, grouped by its section (with the section's size).
// Throws when the ELF cannot be read (the callers choose what that means).
std::vector<ModuleSection> module_sections(const std::string& elf) {
  Elf64View v(elf);
  std::vector<std::string> names(v.shnum);
  for (uint64_t i = 0; i < v.shnum; ++i) names[i] = v.section_name(i);
  std::map<uint64_t, ModuleSection> by_index;
  for (uint64_t i = 0; i < v.shnum; ++i) {
    if (!v.is_symtab(i)) continue;
    const Elf64View::Symbols syms(v, i);
    for (uint64_t k = 0; k < syms.count(); ++k) {
      const uint64_t sym = syms.entry(k), shndx = v.read(sym + 6, 2), info = v.read(sym + 4, 1), sym_size = v.read(sym + 16, 8);
      if ((info & 0xf) != 1 /* STT_OBJECT */ || shndx >= v.shnum || !module_data_section(names[shndx]) || sym_size == 0) continue;
      std::string name = syms.name(k);
      if (name.empty()) continue;
      ModuleSection& sec = by_index[shndx];
      sec.name = names[shndx];
      sec.bytes = static_cast<int64_t>(v.section(shndx, 0x20, 8));  // sh_size (NOBITS .nv.global too)
      sec.objects.push_back({std::move(name), static_cast<int64_t>(v.read(sym + 8, 8)), static_cast<int64_t>(sym_size)});
    }
  }
  std::vector<ModuleSection> out;
  for (auto& [index, sec] : by_index) out.push_back(std::move(sec));
  return out;
}

}  // namespace

std::map<std::string, std::string> cubin_object_sections(const std::string& elf) {
  std::map<std::string, std::string> out;
  try {
    for (const auto& sec : module_sections(elf))
      for (const auto& o : sec.objects) out[o.name] = sec.name;
  } catch (const std::exception&) {  // a report's detail: none
  }
  return out;
}

std::vector<ModuleSection> cubin_writable_sections(const std::string& elf) {
  try {
    return module_sections(elf);
  } catch (const std::exception& e) {
    // What the executor restores before every call: a module it cannot read is not run (an empty list
    // would leave every module variable unrestored between calls).
    throw std::runtime_error(std::string("the module's symbol table could not be read: ") + e.what());
  }
}

std::map<std::string, int64_t> cubin_writable_globals(const std::string& elf) {
  std::map<std::string, int64_t> out;
  for (const auto& sec : cubin_writable_sections(elf))
    for (const auto& o : sec.objects) out[o.name] = o.bytes;
  return out;
}


std::optional<std::map<std::string, int64_t>> cubin_local_bytes(const std::string& elf) {
  try {
    Elf64View v(elf);
    std::optional<uint64_t> info;
    bool code = false;
    for (uint64_t i = 0; i < v.shnum; ++i) {
      const std::string name = v.section_name(i);
      if (name == ".nv.info") info = i;
      if (name.rfind(".text.", 0) == 0) code = true;
    }
    std::map<std::string, int64_t> out;
    if (!info) {
      if (code) return std::nullopt;  // functions without their attributes: unreadable, not "none"
      return out;
    }
    // The symbols the attributes name: the section's sh_link is its symbol table.
    const uint64_t symtab = v.section(*info, 0x28, 4);
    if (symtab >= v.shnum || !v.is_symtab(symtab)) return std::nullopt;
    const Elf64View::Symbols syms(v, symtab);
    if (!syms.readable()) return std::nullopt;
    auto symbol = [&](uint64_t index) -> std::optional<std::string> {
      if (index >= syms.count()) return std::nullopt;
      return syms.name(index);
    };
    // Attributes: a format byte, an attribute byte, then by format nothing (1), a 16-bit value (2, 3)
    // or a 16-bit size and that many bytes (4). Any other format: the layout is not the one read here.
    const uint64_t begin = v.section(*info, 0x18, 8), end = begin + v.section(*info, 0x20, 8);
    if (end > elf.size() || end < begin) return std::nullopt;
    for (uint64_t at = begin; at < end;) {
      if (at + 2 > end) return std::nullopt;
      const uint64_t format = v.read(at, 1), attribute = v.read(at + 1, 1);
      if (format == 1) {
        at += 2;
        continue;
      }
      if (format == 2 || format == 3) {
        at += 4;
        continue;
      }
      if (format != 4 || at + 4 > end) return std::nullopt;
      const uint64_t size = v.read(at + 2, 2);
      if (at + 4 + size > end) return std::nullopt;
      // EIATTR_FRAME_SIZE (0x11) and EIATTR_MIN_STACK_SIZE (0x12): {symbol index, bytes}.
      if ((attribute == 0x11 || attribute == 0x12) && size == 8) {
        const auto name = symbol(v.read(at + 4, 4));
        if (!name) return std::nullopt;
        int64_t& bytes = out[*name];
        bytes = std::max<int64_t>(bytes, static_cast<int64_t>(v.read(at + 8, 4)));
      }
      at += 4 + size;
    }
    return out;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ca::bundle
