//! `#[derive(Module)]` for kael-core models (as burn's derive).
//!
//! NOTE [Derived modules]
//! The derive writes `kael_core::nn::Module` for a struct with named
//! fields: `forward` calls the struct's own inherent
//! `fn forward(&self, &Tensor) -> Result<Tensor>` (inherent functions win
//! over trait methods in `Self::forward`), and `visit` shows each field
//! under its name, so state-dict keys are PyTorch's:
//! - `Tensor`: a parameter (`#[module(buffer)]`: a buffer);
//! - `Option<Tensor>`: a parameter when present;
//! - `Vec<Tensor>`: parameters `name.0`, `name.1`, ...;
//! - `Vec<M>`: children `name.0`, `name.1`, ... (PyTorch's `ModuleList`);
//! - `Option<M>`: a child when present;
//! - numbers, `bool`, `String` and `#[module(skip)]` fields: nothing;
//! - any other type: a child, which must implement `Module`.
//!
//! The choice is by the type as written (`Tensor`, `Option<..>`,
//! `Vec<..>`, by their last path segment), not by trait resolution, which
//! a derive cannot see; `#[module(skip)]` covers the rest.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::{Data, DeriveInput, Fields, GenericArgument, PathArguments, Type, parse_macro_input};

/// See NOTE [Derived modules] in the crate docs.
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What a field is to the walk.
enum Role {
    Skip,
    Param,
    Buffer,
    OptionParam,
    VecParam,
    Child,
    OptionChild,
    VecChild,
}

/// The last path segment of `ty` and its single generic argument, if any.
fn last_segment(ty: &Type) -> Option<(String, Option<&Type>)> {
    let Type::Path(p) = ty else { return None };
    let seg = p.path.segments.last()?;
    let arg = match &seg.arguments {
        PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        }),
        _ => None,
    };
    Some((seg.ident.to_string(), arg))
}

const PLAIN: &[&str] = &[
    "usize",
    "isize",
    "u8",
    "u16",
    "u32",
    "u64",
    "i8",
    "i16",
    "i32",
    "i64",
    "f32",
    "f64",
    "bool",
    "String",
    "char",
    "DType",
    "Device",
    "Reduction",
];

fn is_tensor(ty: &Type) -> bool {
    matches!(last_segment(ty), Some((n, None)) if n == "Tensor")
}

fn role(field: &syn::Field) -> syn::Result<Role> {
    let mut explicit = None;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|m| {
            if m.path.is_ident("skip") {
                explicit = Some(Role::Skip);
                Ok(())
            } else if m.path.is_ident("buffer") {
                explicit = Some(Role::Buffer);
                Ok(())
            } else {
                Err(m.error("expected #[module(skip)] or #[module(buffer)]"))
            }
        })?;
    }
    if let Some(r) = explicit {
        return Ok(r);
    }
    let ty = &field.ty;
    if is_tensor(ty) {
        return Ok(Role::Param);
    }
    Ok(match last_segment(ty) {
        Some((n, _)) if PLAIN.contains(&n.as_str()) => Role::Skip,
        Some((n, Some(inner))) if n == "Option" => {
            if is_tensor(inner) {
                Role::OptionParam
            } else {
                Role::OptionChild
            }
        }
        Some((n, Some(inner))) if n == "Vec" => {
            if is_tensor(inner) {
                Role::VecParam
            } else {
                Role::VecChild
            }
        }
        Some((n, _)) if n == "PhantomData" => Role::Skip,
        _ => Role::Child,
    })
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] needs a struct with named fields",
        ));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] needs a struct with named fields",
        ));
    };
    let mut visits = Vec::new();
    for f in &fields.named {
        let Some(ident) = &f.ident else { continue };
        let name = ident.to_string();
        visits.push(match role(f)? {
            Role::Skip => quote! {},
            Role::Param => quote! { v.param(#name, &self.#ident); },
            Role::Buffer => quote! { v.buffer(#name, &self.#ident); },
            Role::OptionParam => quote! {
                if let ::core::option::Option::Some(t) = &self.#ident { v.param(#name, t); }
            },
            Role::VecParam => quote! {
                for (i, t) in self.#ident.iter().enumerate() {
                    v.param(&::kael_core::nn::indexed_name(#name, i), t);
                }
            },
            Role::Child => quote! { v.module(#name, &self.#ident); },
            Role::OptionChild => quote! {
                if let ::core::option::Option::Some(m) = &self.#ident { v.module(#name, m); }
            },
            Role::VecChild => quote! {
                for (i, m) in self.#ident.iter().enumerate() {
                    v.module(&::kael_core::nn::indexed_name(#name, i), m);
                }
            },
        });
    }
    let ident = &input.ident;
    let (imp, ty, wh) = input.generics.split_for_impl();
    Ok(quote! {
        impl #imp ::kael_core::nn::Module for #ident #ty #wh {
            fn forward(&self, input: &::kael_core::Tensor) -> ::kael_core::Result<::kael_core::Tensor> {
                Self::forward(self, input)
            }
            fn visit(&self, v: &mut dyn ::kael_core::nn::Visitor) {
                #(#visits)*
            }
        }
    })
}
